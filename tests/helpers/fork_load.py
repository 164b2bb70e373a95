"""A run's process under fork load: `python -m tests.fork_load DAYS [--unguarded]`, for test_fork_safety.

It is the process `make backfill` runs, minus the portal work: the real progress watcher
(ops.run_alert.RunAlert) and the real plan governor (ops.steward, reading threadsinfo from the
sandbox at CAPTCHAAI_API_BASE over HTTP every [captchaai] plan_every_s) run their threads while a
real Luigi worker with 4 processes forks one task process per day. Each task logs, makes an HTTP
request to the portal, and writes its day's two files, so the watcher prints a progress line per
day. `--unguarded` swaps portal_export.forksafe.guard for a no-op (the hooks stay, guarding
nothing). Prints one JSON line: exit code, failed days, fork waits.
"""

import argparse
import contextlib
import datetime
import json
import logging
import os
import sys
import time

import luigi
import requests

from ops import luigi_run, run_alert
from ops import steward as governor
from portal_export import forksafe, store_keys
from tasks import config, targets

log = logging.getLogger("tasks.fork_load")
START = datetime.date(2026, 1, 1)


class ForkedDay(luigi.Task):
    date = luigi.DateParameter()

    def output(self):
        return [targets.target(store_keys.day_records(self.date)), targets.target(store_keys.day_health(self.date))]

    def run(self):
        log.info("day %s: task process %d asks the portal", self.date, os.getpid())  # stderr, as every task's
        page = requests.get(
            f"{config.portal_base_url()}/export", params={"day": str(self.date), "region": "north"}, timeout=10
        )
        page.raise_for_status()
        records, health = self.output()
        with records.open("w") as f:
            f.write(b"{}\n")
        with health.open("w") as f:
            f.write(json.dumps({"rows": 1}).encode())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("days", type=int)
    parser.add_argument("--unguarded", action="store_true")
    opts = parser.parse_args()
    if opts.unguarded:
        forksafe.guard = contextlib.nullcontext()
    waits: list[float] = []
    began: list[float] = []
    # Registered after forksafe's: runs before its hook in the parent, and after it once forked.
    os.register_at_fork(
        before=lambda: began.append(time.monotonic()),
        after_in_parent=lambda: waits.append(time.monotonic() - began[-1]),
    )

    days = [START + datetime.timedelta(days=i) for i in range(opts.days)]
    args = argparse.Namespace(
        command="backfill", start=str(days[0]), stop=str(days[-1]), newest_first=False, task_limit=None, workers=4
    )
    from ops.run import lock_dir, log_to_stderr

    log_to_stderr()
    begin = time.monotonic()
    with run_alert.RunAlert(args, days) as run:  # the progress thread: a line per completed day
        with governor.following_plan(None) as factory:  # the plan thread, and the local cap
            code = luigi_run.run(
                [ForkedDay(d) for d in days], factory, lock_dir=str(lock_dir()), scheduler_url=None, workers=4
            )
        run._stop_watching()
    complete = run_alert.complete_days(days)
    missing = [str(d) for d in days if d not in complete]
    waits.sort()
    print(
        json.dumps(
            {
                "code": code,
                "missing": missing,
                "forks": len(waits),
                "seconds": round(time.monotonic() - begin, 2),
                "fork_wait_p50_ms": round(1000 * waits[len(waits) // 2], 2) if waits else None,
                "fork_wait_max_ms": round(1000 * waits[-1], 2) if waits else None,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
