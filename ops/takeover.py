"""luigid's side of a run: the tasks it disabled, the runs it shares work with, its cooldown, and the
tasks whose host died mid-run, finished in the same run by the hosts still running it. luigid DISABLEs
a dead worker's tasks like failed ones, but clears their `worker_running`; a real failure's record
(`PortalTask.on_failure`) is newer (the store's clock) than `time_running` (luigid's). Survivors
re-enable them after `[scheduler] retry_delay` and run Luigi again, `MAX_TAKEOVERS` at most."""

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import luigi.retcodes
import luigi.scheduler
import luigi.task
import requests

from portal_export.failures import read_failure
from tasks import DayExport, RegionExport, config, targets
from tasks.base import PortalTask
from tasks.secrets import say

from . import luigid, run_alert

MAX_TAKEOVERS = 2  # per task and command: a host dying twice under the same task is not bad luck
LUIGID_DONE_COOLDOWN_S = 10  # luigid's [scheduler] stable_done_cooldown_secs, left at its default


def portal_tasks(days: Sequence[date]) -> dict[str, PortalTask]:
    """These days' DayExport and RegionExport tasks, by Luigi task id."""
    found: list[PortalTask] = [DayExport(d) for d in days]
    found += [RegionExport(d, r) for d in days for r in config.regions()]
    return {task.task_id: task for task in found}


def reenable(url: str, days: Sequence[date]) -> None:
    """Let the operator's new run retry tasks luigid disabled after their one failure."""
    wanted = set(portal_tasks(days))
    sched = luigid.remote(url)
    for task_id in sched.task_list("DISABLED", ""):
        if task_id in wanted:
            sched.re_enable_task(task_id)
            say(f"re-enabled {task_id}")


def wait_for_other_runs(url: str, days: Sequence[date], own_workers: Collection[str], pending: bool = True) -> bool:
    """Wait while another run on luigid has work (running, or pending as a stakeholder) on these
    incomplete days; True when one had. `pending=False` (a failed run): running only, since an exited
    worker stays a stakeholder of its pending tasks until luigid prunes it. FAILED counts as pending:
    with retry_count = 1 a task is FAILED only once re-enabled (a takeover on another host, an operator's
    new run), until that run's Luigi adds it again, a moment later."""
    wanted = set(portal_tasks(days))
    sched = luigid.remote(url)
    statuses = ("RUNNING", "PENDING", "FAILED") if pending else ("RUNNING",)
    told = False
    while not all_complete(days):
        # one reading of every status: read one status at a time, a task taken over (FAILED, then PENDING, then
        # RUNNING within a second) was missed while it moved from one to the next
        busy = [
            task_id
            for task_id, task in sched.task_list("", "").items()
            if task_id in wanted
            and task["status"] in statuses
            and (task["status"] == "RUNNING" or any(w not in own_workers for w in task["workers"]))
        ]
        if not busy:
            return told
        if not told:
            say(f"waiting for {len(busy)} task(s) of these days that another run has")
            told = True
        time.sleep(0.5)
    return told


def all_complete(days: Sequence[date]) -> bool:
    return set(days) <= run_alert.complete_days(days)


def settle_done_cooldown(url: str, days: Sequence[date]) -> None:
    """Regions made incomplete on purpose wait out luigid's stable_done_cooldown_secs from when luigid marked them
    DONE: till then it ignores a worker's PENDING for them, and would hand out their day's DayExport at once. On
    luigid's clock: the hand-off from a region's output to luigid's DONE takes seconds on a loaded host."""
    try:
        wait = LUIGID_DONE_COOLDOWN_S - luigid.done_ago(url, set(portal_tasks(days)))
    except (requests.RequestException, ValueError, KeyError, TypeError):
        wait = LUIGID_DONE_COOLDOWN_S  # no reading: the whole cooldown, which is never too short
    if wait > 0:
        say(f"waiting {wait:.0f} s for luigid to let regions it saw finish just now run again")
        time.sleep(wait)


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
    # luigid's [scheduler] retry_delay: `make scheduler` writes its config from this one
    delay_s: float = field(default_factory=lambda: float(luigi.scheduler.scheduler().retry_delay))
    seen: dict[str, float] = field(default_factory=dict)  # task id -> when this host first saw it orphaned
    taken: dict[str, int] = field(default_factory=dict)  # task id -> takeovers so far
    own: Collection[str] = ()  # this command's Luigi workers: the ids of every run's, as they are made

    def revive(self) -> bool:
        """Re-enable this command's DISABLED tasks that died with their worker and may still be taken over,
        retry_delay after each was first seen; False when there is none."""
        orphans = []
        for task_id, task in luigid.remote(self.url).task_list("DISABLED", "").items():
            wanted = task_id in self.tasks and self.taken.get(task_id, 0) < MAX_TAKEOVERS
            if wanted and died_with_worker(task, self.tasks[task_id]):
                orphans.append(task_id)
                self.seen.setdefault(task_id, time.monotonic())
        if not orphans:
            return False
        wait = max(self.seen[t] for t in orphans) + self.delay_s - time.monotonic()
        if wait > 0:
            self.say(
                f"takeover: {len(orphans)} task(s) of these days died with their host; "
                f"running them here in {wait:.0f} s ([scheduler] retry_delay)"
            )
            time.sleep(wait)
        remote = luigid.remote(self.url)
        for task_id in sorted(orphans):
            if remote.re_enable_task(task_id):  # empty when another host re-enabled it first
                self.say(f"takeover: re-enabled {self.tasks[task_id]}, whose host died while running it")
            self.taken[task_id] = self.taken.get(task_id, 0) + 1
        return True

    def left(self) -> bool:
        """Whether a task of this command waits on luigid for a run that nobody has: FAILED, re-enabled (with
        retry_count = 1 nothing else leaves a task FAILED) by another host's takeover whose Luigi has not added it
        yet; or PENDING, ready to run and no other run's, as luigid's prune leaves that task retry_delay later (or a
        task this run was refused, whose other runs have ended). A rerun here adds it too, and luigid gives it to one
        of them: whichever runs it, it is not left for nobody. A PENDING one `MAX_TAKEOVERS` times at most."""
        for task_id, task in luigid.remote(self.url).task_list("", "").items():
            portal_task = self.tasks.get(task_id)
            if portal_task is None or task["status"] not in ("FAILED", "PENDING"):
                continue
            if task["status"] == "PENDING":
                if any(w not in self.own for w in task["workers"]) or self.taken.get(task_id, 0) >= MAX_TAKEOVERS:
                    continue  # another run's, or taken over enough
                if portal_task.complete() or not all(t.complete() for t in luigi.task.flatten(portal_task.requires())):
                    continue  # done, or waiting on a requirement (one that failed, say)
                self.taken[task_id] = self.taken.get(task_id, 0) + 1
            self.say(f"takeover: {portal_task} waits on luigid with no run to take it; running it here")
            return True
        return False

    def run(
        self, code: int, rerun: Callable[[], int], settle: Callable[[bool], object], done: Callable[[], bool]
    ) -> int:
        """After this host's run ended with `code`: take over what died and rerun until nothing is left;
        `settle(failed)` waits for other runs' tasks of these days. The last code, or an earlier failure's."""
        codes = luigi.retcodes.retcode()
        quiet = (0, int(codes.not_run), int(codes.already_running))  # "not done here", which a rerun supersedes
        while not done():
            settle(code not in quiet)
            if not self.revive() and not self.left():
                break
            again = rerun()
            code = again if code in quiet else max(code, again)
        return code
