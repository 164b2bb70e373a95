"""A run whose task processes get stuck unwinding: `python -m tests.helpers.stuck_unwinding DIR TASKS`, for
test_stopping.

The process `make backfill` runs around Luigi (ops.stopping's handlers, the steward, ops.luigi_run's worker with as
many processes as tasks), minus the portal work: task 0 waits as a region in its backoff does, each other one marks a
solve in flight with its task id (n) as a region does once its submit is answered; each writes
DIR/ready-N with its pid and sleeps. Stopped, it unwinds as a region does (deaf to a second stop): it writes
DIR/stopped-N with the time (time.monotonic) and stays stuck in its `finally` for a minute before its mark is
released. Exits with the code the CLI would give (143 for SIGTERM, 130 for Ctrl-C)."""

import os
import sys
import time
from pathlib import Path

import luigi

from ops import luigi_run, steward, stopping
from portal_export.gate import Waiting
from portal_export.inflight import InFlight
from tasks import targets
from tasks.base import PortalTask


class StuckUnwinding(PortalTask):
    n = luigi.IntParameter()
    where = luigi.Parameter()

    def complete(self) -> bool:
        return False

    def failure_key(self) -> str:
        return f"_state/failures/stuck-{self.n}.json"

    def work(self) -> None:
        # the first waits as a region in its backoff does; the others are solves CaptchaAI works on (task n)
        with Waiting(targets.store()).marked() if self.n == 0 else InFlight(targets.store()).flight() as flight:
            if flight is not None:
                flight.submitted(str(self.n))
            Path(self.where, f"ready-{self.n}").write_text(str(os.getpid()))
            try:
                time.sleep(60)
            finally:
                Path(self.where, f"stopped-{self.n}").write_text(str(time.monotonic()))
                time.sleep(60)


def main() -> int:
    where, count = sys.argv[1], int(sys.argv[2])
    with stopping.handled():
        try:
            with steward.following_plan(None) as factory:
                tasks = [StuckUnwinding(n=n, where=where) for n in range(count)]
                luigi_run.run(tasks, factory, lock_dir=where, scheduler_url=None, workers=count)
        except KeyboardInterrupt as stop:
            return 128 + stopping.seen(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
