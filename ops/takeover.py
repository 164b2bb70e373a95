"""Tasks whose host died mid-run, finished in the same run by the hosts still running it.

luigid DISABLEs a dead worker's tasks like failed ones, but clears their `worker_running`; a real
failure's record (`PortalTask.on_failure`) is newer (the store's clock) than `time_running` (luigid's).
Survivors re-enable them after `[scheduler] retry_delay` and run Luigi again, `MAX_TAKEOVERS` at most.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import luigi.retcodes
import luigi.scheduler

from portal_export.failures import read_failure
from tasks import targets
from tasks.base import PortalTask

from . import luigid

MAX_TAKEOVERS = 2  # per task and command: a host dying twice under the same task is not bad luck


def retry_delay() -> float:
    """luigid's `[scheduler] retry_delay` (`make scheduler` writes its config from this one)."""
    return float(luigi.scheduler.scheduler().retry_delay)


def quiet_codes() -> tuple[int, ...]:
    """The codes that say only "not done here", which a takeover's rerun supersedes."""
    codes = luigi.retcodes.retcode()
    return (0, int(codes.not_run), int(codes.already_running))


def died_with_worker(task: Mapping[str, Any], portal_task: PortalTask) -> bool:
    """Whether luigid's DISABLED `task` was failed by luigid for its dead worker, not by a real failure."""
    if task.get("worker_running") or not task.get("time_running"):
        return False  # a worker reported the failure, or the task never ran (a scheduling failure)
    store, key = targets.store(), portal_task.failure_key()
    written = store.written(key)[0].get(key)
    return written is None or read_failure(store, key) is None or written < float(task["time_running"])


@dataclass
class Takeover:
    """One command's takeovers on luigid at `url` of the tasks in `tasks` (luigi task id -> task)."""

    url: str
    tasks: Mapping[str, PortalTask]
    say: Callable[[str], None]
    delay_s: float = field(default_factory=retry_delay)
    seen: dict[str, float] = field(default_factory=dict)  # task id -> when this host first saw it orphaned
    taken: dict[str, int] = field(default_factory=dict)  # task id -> takeovers so far

    def orphans(self) -> list[str]:
        """This command's DISABLED tasks that died with their worker and may still be taken over."""
        found = []
        for task_id, task in luigid.remote(self.url).task_list("DISABLED", "").items():
            wanted = task_id in self.tasks and self.taken.get(task_id, 0) < MAX_TAKEOVERS
            if wanted and died_with_worker(task, self.tasks[task_id]):
                found.append(task_id)
                self.seen.setdefault(task_id, time.monotonic())
        return sorted(found)

    def revive(self, orphans: list[str]) -> None:
        """Wait out retry_delay since each was first seen, then re-enable those still orphaned."""
        wait = max(self.seen[t] for t in orphans) + self.delay_s - time.monotonic()
        if wait > 0:
            self.say(
                f"takeover: {len(orphans)} task(s) of these days died with their host; "
                f"running them here in {wait:.0f} s ([scheduler] retry_delay)"
            )
            time.sleep(wait)
        remote = luigid.remote(self.url)
        for task_id in orphans:
            if remote.re_enable_task(task_id):  # empty when another host re-enabled it first
                self.say(f"takeover: re-enabled {self.tasks[task_id]}, whose host died while running it")
            self.taken[task_id] = self.taken.get(task_id, 0) + 1

    def run(
        self, code: int, rerun: Callable[[], int], settle: Callable[[bool], object], done: Callable[[], bool]
    ) -> int:
        """After this host's run ended with `code`: take over what died and rerun until nothing is left;
        `settle(failed)` waits for other runs' tasks of these days. The last code, or an earlier failure's."""
        while not done():
            settle(code not in quiet_codes())
            orphans = self.orphans()
            if not orphans:
                break
            self.revive(orphans)
            again = rerun()
            code = again if code in quiet_codes() else max(code, again)
        return code
