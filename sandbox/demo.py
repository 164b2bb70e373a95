"""`make demo`: the whole job against the built-in sandbox, through the real CLI, tasks and client.

The sandbox runs at a tenth of real time (solves of a few seconds, polls every half second; the
tests run it faster through DEMO_TIME_SCALE) and
leaves one region unsolvable, so the demo shows a day passing validation with it counted. Output
goes to var/demo/, never to the operator's data/. `--store s3` (`make demo STORE=s3`) runs the same
three days into a bucket of a real S3-compatible store (SeaweedFS) that it starts and stops, its
data under var/demo-s3/. `--shape daily-report` (`make demo SHAPE=daily-report`) exports them from
the sandbox's portal of its own shape instead (sandbox/daily_report.py), described by `[portal]` keys
alone, which it prints.

The run goes through a luigid of the demo's own, started and stopped here, whatever SCHEDULER and
LUIGI_SCHEDULER_URL say: a demo on a deployment's host never joins its luigid, where the sandbox's
key would take slots of the production key's cap and fill its visualiser and counters.
"""

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from portal_export.store import LocalStore, Store, read_json
from sandbox import SANDBOX_KEY, SHAPES, Sandbox, SandboxConfig, sitekey_for
from tasks.s3store import ObjectClient, S3Store

from .daily_report import PORTAL_KEYS
from .luigid import ForegroundLuigid
from .seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS

DEMO_BUCKET = "portal-demo"
DEMO_CAP = 4  # the sandbox's BASIC plan: 5 threads, one spare

DAYS = ("2026-09-01", "2026-09-04")  # [start, stop): three days
# The sandbox's clock against real time: a tenth, or what DEMO_TIME_SCALE says (the tests run it faster).
TIME_SCALE_ENV = "DEMO_TIME_SCALE"
DEMO_CFG = """\
# Written by `make demo`: CaptchaAI's poll schedule at {scale:g} of real time.
[captchaai]
first_poll_s = {first_poll_s:g}
poll_every_s = {poll_every_s:g}
timeout_s = 30
[portal]
retry_base_s = {retry_s:g}
retry_jitter_s = {retry_s:g}
"""


def time_scale() -> float:
    return float(os.environ.get(TIME_SCALE_ENV) or 0.1)


def demo_cfg(scale: float) -> str:
    """CaptchaAI's poll schedule (first poll 15 s, then every 5 s) and a 10 s backoff at `scale`."""
    return DEMO_CFG.format(scale=scale, first_poll_s=15 * scale, poll_every_s=5 * scale, retry_s=10 * scale)


def summarize(store: Store) -> tuple[list[str], dict[str, int]]:
    lines: list[str] = []
    totals = {"rows": 0, "solves": 0, "unsolvable": 0}
    for key in store.list("portal_records_"):
        if not key.endswith(".health.json"):
            continue
        h = read_json(store, key)
        for k in totals:
            totals[k] += h[k]
        unsolvable = ", ".join(h["unsolvable_regions"]) or "-"
        lines.append(
            f"  {h['day']}  rows {h['rows']:4d}  solves {h['solves']}  unsolvable {h['unsolvable']} ({unsolvable})"
            f"  p95 {h['p95_solve_seconds']:.1f} s"
        )
    return lines, totals


@contextlib.contextmanager
def data_dir(root: Path, kind: str) -> Iterator[tuple[str, str, dict[str, str], Store]]:
    """(data dir, extra config, environment, store) of the demo: var/demo/data, or a bucket of a
    SeaweedFS started here (and stopped at the end), reached through Luigi's [s3] section."""
    if kind == "local":
        yield str(root / "data"), "", {}, LocalStore(root / "data")
        return
    weed = SeaweedFS(root / "seaweedfs")
    try:
        url = f"s3://{weed.create_bucket(DEMO_BUCKET)}/export"
        cfg = f"[s3]\nendpoint_url = {weed.endpoint}\nregion_name = {REGION}\n"
        print(f"demo: SeaweedFS (S3) at {weed.endpoint}, data dir {url}", flush=True)
        store = S3Store(
            url,
            client=ObjectClient(
                aws_secret_access_key=SECRET_KEY,
                endpoint_url=weed.endpoint,
                aws_access_key_id=ACCESS_KEY,
                region_name=REGION,
            ),
        )
        # the credentials in boto3's own variables, as an operator would keep them: never in a file
        yield url, cfg, {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}, store
    finally:
        weed.stop()


@contextlib.contextmanager
def own_luigid(root: Path, where: str) -> Iterator[ForegroundLuigid]:
    """A luigid of the demo's own on a free loopback port, its cap the demo's, its /metrics reading the demo's
    data dir; stopped at the end."""
    os.environ["PORTAL_DATA_DIR"] = where  # what its config is written from (ops/luigid.py)
    server = ForegroundLuigid(root / "luigid", resources={"captchaai": DEMO_CAP}, history=False)
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.demo", description=__doc__)
    parser.add_argument("--store", choices=("local", "s3"), default="local", help="where the data dir is")
    parser.add_argument("--shape", choices=SHAPES, default="simple", help="the sandbox portal's shape")
    args = parser.parse_args(argv)
    shaped = args.shape != "simple"
    root = Path(os.environ.get("PORTAL_VAR_DIR", "var")) / ("demo" if args.store == "local" else "demo-s3")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    scale = time_scale()
    cfg = SandboxConfig(
        seed=7,
        time_scale=scale,
        solve="lognormal",
        solve_median_s=25.0,
        solve_sigma=0.35,
        unsolvable_sitekeys=frozenset({sitekey_for("east")}),  # one sitekey for the shaped portal's site: none
        shape=args.shape,
    )
    with (
        Sandbox(cfg) as sb,
        data_dir(root, args.store) as (where, store_cfg, store_env, store),
        own_luigid(root, where) as luigid,
    ):
        # demo_cfg ends in its [portal] section, which the shape's keys join
        (root / "demo.cfg").write_text(demo_cfg(scale) + (PORTAL_KEYS if shaped else "") + store_cfg)
        print(f"demo: sandbox CaptchaAI at {sb.captchaai_url}, portal at {sb.portal_url}", flush=True)
        if shaped:
            keys = PORTAL_KEYS.strip().replace("\n", "\n  ")
            print(f"demo: its {args.shape} portal, described by [portal] keys alone:\n  {keys}", flush=True)
        print(
            f"demo: luigid of its own at {luigid.url} while it runs (visualiser: {luigid.url}/static/visualiser/"
            "index.html); never the luigid of LUIGI_SCHEDULER_URL",
            flush=True,
        )
        env = {
            **os.environ,
            "SCHEDULER": "central",
            "LUIGI_SCHEDULER_URL": luigid.url,
            "CAPTCHAAI_API_KEY": SANDBOX_KEY,
            "CAPTCHAAI_API_BASE": sb.captchaai_url,
            "PORTAL_BASE_URL": sb.portal_url,
            "PORTAL_DATA_DIR": where,
            "PORTAL_VAR_DIR": str(root / "var"),
            "LUIGI_CONFIG_PATH": str(root / "demo.cfg"),
            "ALERT_WEBHOOK_URL": "",  # a demo against the sandbox alerts nobody
            **store_env,
        }
        with open(root / "luigi.log", "w") as log:
            code = subprocess.run(
                [sys.executable, "-m", "ops", "backfill", *DAYS], env=env, stdout=log, stderr=subprocess.STDOUT
            ).returncode
        stats = sb.stats()
        lines, totals = summarize(store)
    said = [line for line in (root / "luigi.log").read_text().splitlines() if line.startswith(("scheduler:", "plan:"))]
    print("\n".join(f"demo: {line}" for line in said))  # which scheduler ran it, and the plan check
    print(f"demo: {len(lines)} days exported through RangeDaily --of DayExport (exit {code}):")
    print("\n".join(lines))
    print(
        f"demo: {totals['rows']} rows, {totals['solves']} solves, {totals['unsolvable']} unsolvable regions; "
        f"peak {stats['threads']['peak']} CaptchaAI threads in use (cap {DEMO_CAP}), "
        f"{stats['key_in_query']} requests with the key in a URL"
    )
    print(f"demo: outputs in {where}/ (portal_records_*.jsonl, *.health.json); Luigi's log in {root / 'luigi.log'}")
    if args.store == "s3":
        print(f"demo: SeaweedFS is stopped again; its data stay in {root / 'seaweedfs'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
