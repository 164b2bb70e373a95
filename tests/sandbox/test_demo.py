"""`make demo`: the whole job against the built-in sandbox, through the real CLI, as a new user runs it."""

import datetime
import json
import os
import re
import subprocess
import sys

import psutil
import pytest

from tests import ROOT
from tests.helpers.runs import Luigid

# The demos' sandbox at 3/100 of real time rather than a tenth: the same runs, in a third of the time.
FAST = {"DEMO_TIME_SCALE": "0.03"}


def demo(tmp_path, module, *argv, timeout=120, **env):
    """`python -m MODULE ARGV` as `make demo` runs it, at the tests' time, its var/ under `tmp_path`."""
    env = {**os.environ, **FAST, "PORTAL_VAR_DIR": str(tmp_path / "var"), **env}
    return subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def production(tmp_path):
    """A deployment's luigid on this host, which the demo's environment points at."""
    server = Luigid(tmp_path / "production")
    yield server
    server.stop()


@pytest.mark.unmeasured
def test_the_demo_exports_three_days_with_one_region_counted_unsolvable_through_its_own_luigid(tmp_path, production):
    # as a deployment's env file would set them
    run = demo(tmp_path, "sandbox.demo", SCHEDULER="auto", LUIGI_SCHEDULER_URL=production.url)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "demo: 3 days exported through RangeDaily --of DayExport (exit 0):" in run.stdout
    assert "peak 4 CaptchaAI threads in use (cap 4), 0 requests with the key in a URL" in run.stdout
    # the production luigid saw no worker and no task of the demo: no slot of its cap was taken
    assert production.rpc("worker_list") == [] and production.rpc("task_list", status="", upstream_status="") == {}
    own = re.search(r"^demo: scheduler: central at (http://127\.0\.0\.1:\d+) ", run.stdout, re.M)
    assert own and own.group(1) != production.url, run.stdout
    data = tmp_path / "var" / "demo" / "data"
    for day in ("2026-09-01", "2026-09-02", "2026-09-03"):
        health = json.loads((data / f"portal_records_{day}.health.json").read_text())
        assert health["solves"] == 3 and health["unsolvable_regions"] == ["east"], health
        assert len((data / f"portal_records_{day}.jsonl").read_text().splitlines()) == health["rows"] > 0


@pytest.mark.unmeasured
def test_the_shaped_demo_exports_the_days_exactly_from_a_portal_of_its_own_shape(tmp_path):
    from sandbox import REGIONS
    from sandbox.portal_data import report_records
    from tests.helpers.cfg import MARKET

    run = demo(tmp_path, "sandbox.demo", "--shape", "daily-report")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "demo: 3 days exported through RangeDaily --of DayExport (exit 0):" in run.stdout
    assert (
        "demo: its daily-report portal, described by [portal] keys alone:\n  export_page = /reports/daily\n"
        in run.stdout
    )
    data = tmp_path / "var" / "demo" / "data"
    for day in ("2026-09-01", "2026-09-02", "2026-09-03"):
        expected = [json.dumps(r, ensure_ascii=False) for g in REGIONS for r in report_records(day, MARKET[g])]
        assert (data / f"portal_records_{day}.jsonl").read_text().splitlines() == expected


@pytest.mark.long
@pytest.mark.unmeasured
def test_the_s3_demo_exports_the_same_days_into_a_bucket_of_a_store_it_starts_and_stops(tmp_path):
    run = demo(tmp_path, "sandbox.demo", "--store", "s3")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "demo: 3 days exported through RangeDaily --of DayExport (exit 0):" in run.stdout
    assert "demo: outputs in s3://portal-demo/export/" in run.stdout
    assert run.stdout.count("solves 3  unsolvable 1 (east)") == 3
    home = tmp_path / "var" / "demo-s3"
    assert not (home / "data").exists()  # nothing in a local data dir
    weeds = [p for p in psutil.process_iter(["cmdline"]) if str(home) in " ".join(p.info["cmdline"] or [])]
    assert weeds == []  # the store it started is stopped


@pytest.mark.long
@pytest.mark.unmeasured
def test_the_fleet_demo_kills_a_host_and_what_it_says_holds_in_the_bucket(tmp_path):
    """`make demo-fleet`'s entry: three hosts, one SIGKILLed mid-backfill. What it prints (who took
    over what, the cap held, every day exact) is checked against the sandbox-independent truth: the
    bucket, read back from its SeaweedFS (reopened on the data the demo left), and the process list."""
    from sandbox import expected_records
    from sandbox.demo_fleet import BUCKET, HOSTS, START, VICTIM
    from sandbox.seaweedfs import SeaweedFS

    run = demo(tmp_path, "sandbox.demo_fleet", timeout=240)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    home = tmp_path / "var" / "demo-fleet"
    left = [p for p in psutil.process_iter(["cmdline"]) if str(home) in " ".join(p.info["cmdline"] or [])]
    assert left == []  # SeaweedFS, luigid and the hosts are stopped
    assert "demo-fleet: stopped everything it started" in out
    assert "/static/visualiser/index.html#tab=resources" in out
    assert re.search(r"luigid captchaai [1-4]/4 used", out)  # the Resources page's figures while it ran

    killed = re.search(
        rf"demo-fleet: killed {VICTIM} \(SIGKILL of its whole tree: \d+ processes\) .*: (.*)$", out, re.M
    )
    assert killed, out
    held = set(killed.group(1).split(", "))
    taken = set()
    for host in HOSTS:
        if host == VICTIM:
            assert f"demo-fleet: {host}: killed" in out
            continue
        line = re.search(rf"^demo-fleet: {host}: exit 0, ran \d+ regions; took over (.*)$", out, re.M)
        assert line, out
        taken |= set() if line.group(1) == "nothing" else set(line.group(1).split(", "))
    assert taken and taken <= held, (taken, held)  # only the dead host's regions, each by one host
    peak = re.search(
        r"demo-fleet: peak (\d+) concurrent solves at CaptchaAI \(sandbox's count\), cap 4: the cap held", out
    )
    assert peak and int(peak.group(1)) <= 4, out
    assert "demo-fleet: each of the 24 regions delivered once" in out

    weed = SeaweedFS.reopen(home / "seaweedfs")  # the bucket as the demo left it
    try:
        client = weed.client()
        for i in range(6):
            day = str(datetime.date.fromisoformat(START) + datetime.timedelta(days=i))
            body = client.get_object(Bucket=BUCKET, Key=f"export/portal_records_{day}.jsonl")["Body"].read().decode()
            expected = [
                json.dumps(r, ensure_ascii=False)
                for region in ("north", "south", "east", "west")
                for r in expected_records(day, region)
            ]
            assert body.splitlines() == expected, day
            health = json.loads(
                client.get_object(Bucket=BUCKET, Key=f"export/portal_records_{day}.health.json")["Body"].read()
            )
            assert health["day"] == day and health["solves"] >= 4
    finally:
        weed.stop()
    assert f"demo-fleet: every day exact and complete in s3://{BUCKET}/export: 6 of 6 days, nothing lost" in out
