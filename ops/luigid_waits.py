"""luigid's side of a run: the tasks it disabled, the runs it shares work with, and its cooldown."""

import datetime
import time
from collections.abc import Collection, Sequence

from portal_export.state import store_now
from tasks import config, targets
from tasks.base import PortalTask
from tasks.day import DayExport
from tasks.region import RegionExport
from tasks.secrets import say

from . import luigid, run_alert

LUIGID_DONE_COOLDOWN_S = 10  # luigid's [scheduler] stable_done_cooldown_secs, left at its default


def portal_tasks(days: Sequence[datetime.date]) -> dict[str, PortalTask]:
    """These days' DayExport and RegionExport tasks, by Luigi task id."""
    found: list[PortalTask] = [DayExport(d) for d in days]
    found += [RegionExport(d, r) for d in days for r in config.regions()]
    return {task.task_id: task for task in found}


def reenable(url: str, days: Sequence[datetime.date]) -> None:
    """Let the operator's new run retry tasks luigid disabled after their one failure."""
    wanted = set(portal_tasks(days))
    sched = luigid.remote(url)
    for task_id in sched.task_list("DISABLED", ""):
        if task_id in wanted:
            sched.re_enable_task(task_id)
            say(f"re-enabled {task_id}")


def wait_for_other_runs(
    url: str, days: Sequence[datetime.date], own_workers: Collection[str], pending: bool = True
) -> bool:
    """Wait while another run on luigid has work (running, or pending as a stakeholder) on these
    incomplete days; True when one had. `pending=False` (a failed run): running only, since an exited
    worker stays a stakeholder of its pending tasks until luigid prunes it."""
    wanted = set(portal_tasks(days))
    sched = luigid.remote(url)
    statuses = ("RUNNING", "PENDING") if pending else ("RUNNING",)
    told = False
    while not all_complete(days):
        busy = [
            task_id
            for status in statuses
            for task_id, task in sched.task_list(status, "").items()
            if task_id in wanted and (status == "RUNNING" or any(w not in own_workers for w in task["workers"]))
        ]
        if not busy:
            return told
        if not told:
            say(f"waiting for {len(busy)} task(s) of these days that another run has")
            told = True
        time.sleep(0.5)
    return told


def all_complete(days: Sequence[datetime.date]) -> bool:
    return set(days) <= run_alert.complete_days(days)


def settle_done_cooldown(done_at: float) -> None:
    """A task made incomplete on purpose waits out luigid's stable_done_cooldown_secs (the store's clock)."""
    wait = done_at + LUIGID_DONE_COOLDOWN_S + 0.5 - store_now(targets.store())
    if wait > 0:
        say(f"waiting {wait:.0f} s for luigid to let regions it saw finish just now run again")
        time.sleep(wait)
