"""The Luigi side of the cap that follows the plan (portal_export.governor decides the number). The scheduler's
`captchaai` total is the cap plus a slot per region that waits (`portal_export.gate` keeps solves at the cap). Of
the runs sharing a luigid only the lease holder (`portal_export.lease`) sets it; another takes over when it ends
or dies, and the last run out puts the configured cap back."""

import contextlib
import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import luigi.rpc
import luigi.scheduler

from portal_export import forksafe
from portal_export.caplog import CapLog
from portal_export.gate import CapInForce, Waiting
from portal_export.governor import Governor, Reading, target_cap, why
from portal_export.inflight import InFlight
from portal_export.lease import Lease
from portal_export.runs import RUN_ENV, Runs, current_run, heartbeat_s, own_run, ttl_s
from portal_export.store import LocalStore
from tasks import config, targets
from tasks.config import RESOURCE, RUN_STARTED, configured_cap
from tasks.region import make_solver, settle

from . import stopping
from .luigi_run import WorkerSchedulerFactory
from .luigid import bare, remote, shown

log = logging.getLogger(__name__)
LEND_EVERY_S = 0.05  # how soon a region that starts waiting lends its slot (Luigi asks every wait_interval, 0.2 s)
REMOTE_LEND_EVERY_S = 0.5
FRESH_S = 5.0  # a plan check this young is the governor's first reading: one threadsinfo request for both


@dataclasses.dataclass(frozen=True)
class PlanSeen:
    """The run's plan check: (threads, working), and when (time.monotonic)."""

    threads: int
    working: int
    at: float = dataclasses.field(default_factory=time.monotonic)

    def fresh(self) -> tuple[int, int] | None:
        """The reading while young enough to be the governor's first; else None."""
        return (self.threads, self.working) if time.monotonic() - self.at < FRESH_S else None


@dataclasses.dataclass
class LocalCap:
    """The local scheduler's resource; the cap set before Luigi creates the scheduler waits for it."""

    scheduler: luigi.scheduler.Scheduler | None = None
    cap: int | None = None

    def attach(self, scheduler: luigi.scheduler.Scheduler) -> None:
        self.scheduler = scheduler
        if self.cap is not None:
            scheduler.update_resource(RESOURCE, self.cap)

    def set(self, cap: int) -> None:
        self.cap = cap
        if self.scheduler is not None:
            self.scheduler.update_resource(RESOURCE, cap)


@dataclasses.dataclass
class WorkerCount:
    """Luigi's worker processes follow the slots (at most [core] workers): a spare one polls luigid, costing it CPU."""

    worker: Any = None
    most: int = 0
    wanted: int | None = None

    def attach(self, worker: Any, processes: int) -> None:
        self.worker, self.most = worker, processes
        if self.wanted is not None:
            self.set(self.wanted)

    def set(self, slots: int) -> None:
        self.wanted = slots
        if self.worker is not None and self.most > 1:
            # Never 1: Luigi runs tasks in its own process then (worker.py:1048), without die_with_worker.
            self.worker.worker_processes = max(2, min(self.most, slots))


class Steward:
    """Keeps the scheduler's captchaai total at the cap plus the regions that wait while this run owns it."""

    def __init__(self, url: str | None, seen: tuple[int, int] | None = None, follow: bool = True) -> None:
        cfg = config.captchaai()
        self.url, self.seen, self.follow = url, seen, follow
        self.configured = configured_cap()
        self.store = store = targets.store()
        self.run = current_run()
        # one luigid, one key: its URL without credentials (runs with another login share its cap)
        self.key = hashlib.sha256(bare(url or "local").rstrip("/").encode()).hexdigest()[:12]
        # verdicts on other hosts' runs kept a second: the lender's look is a LIST, not also a GET per host
        self.runs = Runs(store, ttl_s(cfg.plan_every_s), cache_s=1.0)
        self.lease = Lease(store, self.key, self.runs, self.run)
        self.caplog = CapLog(store)
        self.inflight = InFlight(store, self.runs, self.run, settle(cfg))
        self.waiting = Waiting(store, self.runs, self.run)
        self.cap_file = CapInForce(store, self.runs)
        self.local, self.workers = LocalCap(), WorkerCount()
        self.where = f"luigid's at {shown(url)}" if url else "the local scheduler's"
        self.every_s, self.spare, self.heartbeat_s = cfg.plan_every_s, cfg.spare_threads, heartbeat_s(cfg.plan_every_s)
        # how often the owner counts the regions that wait: a LIST each, costly on an object store
        self.lend_every_s = LEND_EVERY_S if isinstance(store, LocalStore) else REMOTE_LEND_EVERY_S
        self.cap: int | None = None
        self.governor: Governor | None = None
        self._owner = False
        self._stop, self._lend_stop = threading.Event(), threading.Event()
        self._keeper: threading.Thread | None = None
        self._lender: threading.Thread | None = None
        self._slots = threading.Lock()
        self._busy = False
        self._lent = 0  # slots lent to regions that wait
        self._total: int | None = None  # the scheduler's captchaai total as this run last set it

    def set_cap(self, cap: int, reason: str) -> None:
        if self.cap is None:
            log.info(
                "cap %d (%s, configured %d): %s; set by run %s", cap, self.where, self.configured, reason, self.run
            )
        else:
            log.warning("cap %d → %d: %s", self.cap, cap, reason)
        self.cap = cap
        self._apply()
        self.caplog.note(cap, self.configured, reason, self.run)

    def blocked(self, reason: str | None) -> None:
        """No usable thread by the deadline: the waiting regions start, to fail with PLAN_BUSY."""
        self.caplog.set_busy(reason)
        self._busy = reason is not None
        if reason is not None:
            log.error("cap: %s; failing the waiting regions with PLAN_BUSY", reason)
        self._apply()

    def _apply(self) -> None:
        """The scheduler's total: the cap in force plus a slot lent to each region that waits."""
        with self._slots:
            cap = self.configured if self._busy or self.cap is None else self.cap
            total = cap + self._lent
            if total != self._total:
                self.workers.set(total)  # first: a process is there by the time the slot is
                if self.url:
                    remote(self.url).update_resource(RESOURCE, total)
                else:
                    self.local.set(total)
                self._total = total
                if self._lent:
                    log.debug("captchaai slots %d: cap %d, %d lent to regions that wait", total, cap, self._lent)

    def _lend(self, stop: threading.Event) -> None:
        while not stop.wait(self.lend_every_s):
            with forksafe.guard:  # a LIST, and setting luigid's total talk HTTP and may log: no fork in the middle
                if stop.is_set():
                    return  # stopped while waiting for the guard: by the heartbeat, stepping down
                try:
                    lent = self.waiting.count()
                    if lent != self._lent:
                        self._lent = lent
                        self._apply()
                except Exception:  # luigid or the store did not answer: the next look tries again
                    log.exception("cap: could not lend slots to the regions that wait")
                    self._total = None

    def _try_own(self) -> bool:
        """Take the cap if nobody alive owns it (a local scheduler is this run's alone)."""
        if self.url and not self.lease.acquire():
            return False
        self._owner = True
        self.caplog.set_busy(None)  # a verdict left by a run that was killed
        if self.follow:
            solver = make_solver()  # threadsinfo with the tasks' key and breaker: an open breaker keeps the cap
            solver.settles(self.inflight)  # and polls of the solves stopped processes left, as the governor counts
            self.governor = Governor(
                solver,
                self.inflight,
                configured=self.configured,
                spare=self.spare,
                every_s=self.every_s,
                set_cap=self.set_cap,
                blocked=self.blocked,
                # solves refused as busy wait for a reading made after their refusal
                on_read=lambda cap: self.cap_file.write(cap, time.time(), self.run),
            )
            self.cap = None  # the new governor's first reading is logged as the start of its ownership
            self.governor.start(self.seen)
        else:
            self.cap = self.configured
            self._apply()
        self.seen = None
        self._lend_stop = threading.Event()  # one per ownership: a lender of an earlier one never restarts
        self._lender = threading.Thread(target=self._lend, args=(self._lend_stop,), name="slot-lender", daemon=True)
        self._lender.start()
        return True

    def _step_down(self) -> None:
        """Another run holds the lease now (this one was taken for dead): stop setting the cap."""
        log.warning("cap: run %s took the cap over (%s); this run stops setting it", self.lease.holder(), self.where)
        # Not joined: this thread holds forksafe.guard, under which both check their stop.
        self._lend_stop.set()
        if self.governor is not None:
            self.governor.stop(wait=False)
            self.governor = None
        self._total, self._owner = None, False

    def _take_over(self) -> None:
        if not self._try_own() or self.lease.previous in (None, self.run):
            return
        before = self.lease.previous
        age = self.runs.age(before)  # a dead host's heartbeat is still there; an ended run deleted its own
        how = "ended" if age is None else f"stopped its heartbeat {age:.1f} s ago (TTL {self.runs.ttl:.0f} s)"
        log.warning("cap: run %s took over the cap (%s): run %s that set it %s", self.run, self.where, before, how)

    def _keep(self) -> None:
        """Every heartbeat: beat; the owner checks its lease, the others take over a dead one's."""
        while not self._stop.wait(self.heartbeat_s):
            with forksafe.guard:  # store requests and logging: no fork in the middle
                try:
                    self.runs.beat(self.run, key=self.key)
                    if not self._owner:
                        self._take_over()
                    elif self.url and not self.lease.held():
                        self._step_down()
                    if self._owner and self.cap is not None:
                        self.caplog.still(self.cap, self.configured, self.run)  # within the log's lookback
                except Exception:  # the store or CaptchaAI did not answer: the next heartbeat tries again
                    log.exception("cap: heartbeat failed; trying again at the next one")

    def start(self) -> None:
        self.runs.beat(self.run, key=self.key)
        if not self._try_own():
            self.seen = None  # the plan check's reading is stale by the time this run takes over
            if self.follow:
                log.info("cap: another run sets the cap (%s); this one takes over if it ends first", self.where)
        self._keeper = threading.Thread(target=self._keep, name="plan-steward", daemon=True)
        self._keeper.start()

    def stop(self) -> None:
        self._stop.set()
        self._lend_stop.set()
        for thread in (self._keeper, self._lender):
            if thread is not None:
                thread.join(timeout=5)
        self.runs.end(self.run)
        if stopping.requested():  # a task process killed on the way out (ops/luigi_run.py) left its marks
            self.inflight.prune_dead(poll=False)  # a stopped run polls nothing: the next lister will
            self.waiting.prune_dead()
        if self.governor is not None:
            self.governor.stop()
        if self._owner:
            self.caplog.set_busy(None)
            self.cap_file.clear(self.run)
        others = self.runs.prune_dead(self.key)
        if not self.url or others:
            return
        # The last run out puts the configured cap back; a non-owner too when the owner died untaken.
        if not self._owner and not self.lease.acquire():
            return
        if self.follow and self.cap != self.configured:
            self.set_cap(self.configured, "no run follows the plan any more: the configured cap")
        self._lent, self._busy = 0, False
        if self._total != self.configured:
            self._apply()


@contextlib.contextmanager
def following_plan(url: str | None, seen: PlanSeen | None = None) -> Iterator[WorkerSchedulerFactory]:
    """Around a run: the factory of a Steward's scheduler, whose workers wait for a slot rather than exit."""
    os.environ[RUN_STARTED] = str(time.time())
    os.environ[RUN_ENV] = own_run()  # the run id its tasks mark their solves with
    try:
        steward = Steward(url, seen.fresh() if seen else None, config.captchaai().follow_plan)
        steward.start()
        try:
            settings = targets.worker_settings()
            yield WorkerSchedulerFactory(steward.local.attach, steward.workers.attach, keep_alive=True, **settings)
        finally:
            try:
                steward.stop()
            except luigi.rpc.RPCError as err:
                if not stopping.requested():
                    raise
                # stopped on purpose, luigid silent: it keeps the cap this run set until the next run sets it
                log.warning("cap: luigid did not answer as the run stopped: %s", err)
    finally:
        os.environ.pop(RUN_STARTED, None)
        os.environ.pop(RUN_ENV, None)


def describe(threads: int, working: int) -> str:
    """`make plan`'s line on the cap that follows the plan (also said at the start of every run)."""
    cfg = config.captchaai()
    configured = configured_cap()
    if not cfg.follow_plan:
        return f"cap: follow_plan = false: the cap stays {configured}"
    store = targets.store()
    reading = Reading(
        threads, working, InFlight(store, Runs(store, ttl_s(cfg.plan_every_s)), settle=settle(cfg)).count()
    )
    line = (
        f"cap: {target_cap(configured, cfg.spare_threads, reading)} of {configured} configured, following the plan "
        f"({why(configured, cfg.spare_threads, reading)}; {reading.own} solves of ours in flight)"
    )
    last = CapLog(store).last()
    if last is not None:
        line += f"; last change: cap {last['cap']} by {last.get('run', '?')}: {last['reason']}"
    return line
