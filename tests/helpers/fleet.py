"""What the fleet tests share: their days, cap and timings, the hosts' environment (luigid, one bucket, the sandbox; no
directory) and reading the bucket through the store's own S3 API."""

import json
import os
from collections import Counter
from urllib.parse import parse_qs, urlsplit

from sandbox import REGIONS, SANDBOX_KEY, expected_records
from tests.helpers.cfg import FAST_CLIENT, polls
from tests.helpers.speed import scaled

START, STOP = "2026-05-01", "2026-05-07"  # the fleets' backfill
DAYS = [f"2026-05-0{d}" for d in range(1, 7)]
CAP = 4  # luigi.cfg's [resources] captchaai, which luigid serves
PLAN_EVERY_S = 0.5
# 3 s solves polled in CaptchaAI's proportions; the plan re-read often
TIMINGS = {
    "captchaai": {**FAST_CLIENT["captchaai"], "plan_every_s": PLAN_EVERY_S, **polls(3.0), "timeout_s": scaled(10)},
    "portal": FAST_CLIENT["portal"],
}


def shared_env(sb, central, data_url):
    """What every host is given: luigid (unless `central` is None), the bucket (`data_url`, with the
    store's endpoint and credentials that the s3_data_dir fixture put in this process's
    environment) and the sandbox."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "LUIGI_", "CAPTCHAAI_"))}
    assert data_url.startswith("s3://") and env["AWS_ENDPOINT_URL_S3"], "the hosts share a bucket, no directory"
    return {
        **env,
        # SCHEDULER=central and LUIGI_SCHEDULER_URL; without, local: never a luigid of 8082 the test did not start
        **(central.env if central else {"SCHEDULER": "local"}),
        "CAPTCHAAI_API_KEY": SANDBOX_KEY,
        "CAPTCHAAI_API_BASE": sb.captchaai_url,
        "PORTAL_BASE_URL": sb.portal_url,
        "PORTAL_DATA_DIR": data_url,
    }


class Bucket:
    """The data dir's objects, read with boto3 straight from the store (not through the project's code)."""

    def __init__(self, seaweedfs, data_url):
        self.client = seaweedfs.client()
        self.name, _, prefix = data_url.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/") + "/"

    def keys(self, under=""):
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.prefix + under)
        return sorted(o["Key"].removeprefix(self.prefix) for page in pages for o in page.get("Contents", []))

    def read(self, key):
        return self.client.get_object(Bucket=self.name, Key=self.prefix + key)["Body"].read().decode()

    def day_lines(self, day):
        return self.read(f"portal_records_{day}.jsonl").splitlines()


def expected_lines(day, regions=REGIONS):
    return [json.dumps(r, ensure_ascii=False) for region in regions for r in expected_records(day, region)]


# luigid notices a dead host within seconds here: it declares a worker dead after 4 s without a
# ping (workers ping every second) and looks at every get_work; the hosts' CLIs wait 1 s of
# retry_delay before taking its tasks over. Production values and their trade-off: luigi.cfg.
FAST_DEATH = {"worker_disconnect_delay": 4, "retry_delay": 1, "prune_on_get_work": "true"}


def submits(sb):
    """CaptchaAI tasks submitted, by (day, region) of the page they were for."""
    pages = (parse_qs(urlsplit(t["pageurl"]).query) for t in sb.tasks())
    return Counter((q["day"][0], q["region"][0]) for q in pages)


def region_of(task):
    """(day, region) of a RegionExport as luigid lists it."""
    return task["params"]["date"], task["params"]["region"]


def told(runs):
    """The runs' ends, whole, as an assertion's message: pytest cuts a message that is no string to 240 characters."""
    return "\n\n".join(f"== {r.name}: exit {r.code}, killed {r.killed}\n{r.err[-6000:]}" for r in runs)
