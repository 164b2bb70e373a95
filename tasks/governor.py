"""The Luigi side of the cap that follows the plan (portal_export.governor decides the number).

The cap in force is the `captchaai` resource of the scheduler that grants the slots: luigid's,
set through its `update_resource` RPC (the one the visualiser's Resources page uses), or the local
scheduler's, in this process. Luigi creates the local scheduler inside the run; its documented hook
for that is `worker_scheduler_factory`, so the run goes through `run_with_retcodes` below, Luigi's
own with that one argument added (as gokart does), and the factory hands the scheduler over.

Several runs may share one luigid: only one governor sets its cap, the holder of an flock in the
runtime folder (`targets.runtime_dir()`, named for the scheduler's URL); the others wait to take over. The last one
out puts the configured cap back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import luigi
import luigi.configuration
import luigi.execution_summary
import luigi.interface
import luigi.retcodes
import luigi.rpc
import luigi.scheduler
from luigi.setup_logging import InterfaceLogging

from portal_export.breaker import KeyBreaker
from portal_export.caplog import CapLog
from portal_export.captchaai import CaptchaAI
from portal_export.governor import Governor, Reading, target_cap, why
from portal_export.inflight import InFlight, alive

from . import config, targets
from .scheduler import remote

log = logging.getLogger(__name__)
RESOURCE = "captchaai"
RUN_STARTED = "PORTAL_EXPORT_RUN_STARTED"  # for the health files' seconds_below_cap; tasks inherit it
# The run's plan check (`describe`) and its governor's first reading are one threadsinfo request.
_checked: tuple[int, int, float] | None = None


def configured_cap() -> int:
    """[resources] captchaai: the ceiling, whatever the cap in force is now."""
    return int(luigi.configuration.get_config().getint("resources", RESOURCE, 1))


class LocalCap:
    """The local scheduler's resource; the cap set before Luigi creates the scheduler waits for it."""

    def __init__(self) -> None:
        self.scheduler: luigi.scheduler.Scheduler | None = None
        self.cap: int | None = None

    def attach(self, scheduler: luigi.scheduler.Scheduler) -> None:
        self.scheduler = scheduler
        if self.cap is not None:
            scheduler.update_resource(RESOURCE, self.cap)

    def set(self, cap: int) -> None:
        self.cap = cap
        if self.scheduler is not None:
            self.scheduler.update_resource(RESOURCE, cap)


class LuigidCap:
    def __init__(self, url: str) -> None:
        self.url = url

    def set(self, cap: int) -> None:
        remote(self.url).update_resource(RESOURCE, cap)


class SchedulerFactory(luigi.interface._WorkerSchedulerFactory):
    """Luigi's default factory, handing the local scheduler it creates to the cap."""

    def __init__(self, local: LocalCap) -> None:
        self.local = local

    def create_local_scheduler(self) -> luigi.scheduler.Scheduler:
        # what Luigi's own factory creates (interface.py), kept here to hand it over
        scheduler = luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)
        self.local.attach(scheduler)
        return scheduler


def run_with_retcodes(argv: list[str], factory: SchedulerFactory | None = None) -> None:
    """luigi.retcodes.run_with_retcodes (Luigi 3.8.1), with a worker_scheduler_factory: SystemExit
    with the [retcode] of the run."""
    logger = logging.getLogger("luigi-interface")
    with luigi.cmdline_parser.CmdlineParser.global_instance(argv):
        retcodes = luigi.retcodes.retcode()
    try:
        worker = luigi.interface._run(argv, worker_scheduler_factory=factory).worker
    except luigi.interface.PidLockAlreadyTakenExit:
        sys.exit(retcodes.already_running)
    except Exception:
        InterfaceLogging.setup(luigi.interface.core())
        logger.exception("Uncaught exception in luigi")
        sys.exit(retcodes.unhandled_exception)
    with luigi.cmdline_parser.CmdlineParser.global_instance(argv):
        task_sets = luigi.execution_summary._summary_dict(worker)
        root_task = luigi.execution_summary._root_task(worker)
        non_empty = {k for k, v in task_sets.items() if v}
    codes_and_conds = (
        (retcodes.missing_data, "still_pending_ext" in non_empty),
        (retcodes.task_failed, "failed" in non_empty),
        (retcodes.already_running, "run_by_other_worker" in non_empty),
        (retcodes.scheduling_error, "scheduling_error" in non_empty),
        (retcodes.not_run, "not_run" in non_empty),
    )
    code = max(c * (1 if cond else 0) for c, cond in codes_and_conds)
    if code == 0 and root_task not in task_sets["completed"] and root_task not in task_sets["already_done"]:
        sys.exit(retcodes.not_run)
    sys.exit(code)


def _scheduler_key(url: str) -> str:
    return hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]


class Steward:
    """Starts a Governor when this run may set the cap, and stops it (restoring the cap) at the end."""

    def __init__(self, url: str | None, seen: tuple[int, int] | None = None) -> None:
        cfg = config.captchaai()
        self.url = url
        self.seen = seen
        self.configured = configured_cap()
        self.state = targets.runtime_dir()  # the lock and registry below are this host's
        self.caplog = CapLog(targets.store())
        self.inflight = InFlight(self.state)
        self.local = LocalCap()
        self.target: LocalCap | LuigidCap = LuigidCap(url) if url else self.local
        self.where = f"luigid's at {url}" if url else "the local scheduler's"
        self.cap: int | None = None
        self.governor = Governor(
            plan_client(),
            self.inflight,
            configured=self.configured,
            spare=cfg.spare_threads,
            every_s=cfg.plan_every_s,
            set_cap=self.set_cap,
            blocked=self.blocked,
        )
        key = _scheduler_key(url or "local")
        self.lock_path = self.state / f"governor-{key}.lock"
        self.registry = self.state / "governors"
        self.me = self.registry / f"{os.getpid()}-{key}"
        self._lock: Any = None
        self._owner = False
        self._stop = threading.Event()
        self._waiter: threading.Thread | None = None

    def set_cap(self, cap: int, reason: str) -> None:
        self.target.set(cap)
        if self.cap is None:
            log.info("cap %d (%s, configured %d): %s", cap, self.where, self.configured, reason)
        else:
            log.warning("cap %d → %d: %s", self.cap, cap, reason)
        self.cap = cap
        self.caplog.note(cap, self.configured, reason)

    def blocked(self, reason: str | None) -> None:
        """Past the deadline with no usable thread: let the waiting regions start, to fail with PLAN_BUSY."""
        self.caplog.set_busy(reason)
        if reason is not None:
            log.error("cap: %s; failing the waiting regions with PLAN_BUSY", reason)
            self.target.set(self.configured)

    def _try_own(self) -> bool:
        if self.url:  # a local scheduler is this run's alone: nobody to share it with
            f = open(self.lock_path, "a")  # noqa: SIM115 (held for as long as this run owns the cap)
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                return False
            self._lock = f
        self._owner = True
        self.caplog.set_busy(None)  # a verdict left by a run that was killed
        self.governor.start(self.seen)
        self.seen = None
        return True

    def _wait_to_own(self) -> None:
        while not self._stop.wait(min(1.0, self.governor.every_s / 2)):
            if self._try_own():
                log.info("cap: this run sets the cap now (%s; the run that did has ended)", self.where)
                return

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        if self.url:
            self.registry.mkdir(exist_ok=True)
            self.me.touch()
        if not self._try_own():
            self.seen = None  # the plan check's reading is stale by the time this run takes over
            log.info("cap: another run sets the cap (%s); this one takes over if it ends first", self.where)
            self._waiter = threading.Thread(target=self._wait_to_own, name="plan-steward", daemon=True)
            self._waiter.start()

    def _others_running(self) -> bool:
        mine = self.me.name.split("-", 1)[1]
        for path in self.registry.iterdir():
            pid_text, _, key = path.name.partition("-")
            if path == self.me or key != mine or not pid_text.isdigit():
                continue
            if alive(int(pid_text)):
                return True
            path.unlink(missing_ok=True)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._waiter is not None:
            self._waiter.join(timeout=5)
        self.me.unlink(missing_ok=True)
        if not self._owner:
            return
        self.governor.stop()
        self.caplog.set_busy(None)
        if self.url and self.cap != self.configured and not self._others_running():
            # The last run out: luigid keeps the configured cap until a run follows the plan again.
            self.set_cap(self.configured, "no run follows the plan any more: the configured cap")
        if self._lock is not None:
            self._lock.close()


def plan_client() -> CaptchaAI:
    """The client that reads threadsinfo: the tasks' key and breaker (an open breaker keeps the cap)."""
    key = config.api_key()
    return CaptchaAI(
        key,
        config.api_base(),
        http_timeout_s=config.captchaai().http_timeout_s,
        breaker=KeyBreaker(targets.store(), key),
    )


@contextlib.contextmanager
def following_plan(url: str | None) -> Iterator[tuple[list[str], SchedulerFactory | None]]:
    """Around a run: (extra Luigi arguments, scheduler factory) that make its cap follow the plan.

    Local runs get keep-alive, so that regions wait for a slot the cap holds back instead of the
    worker exiting with them unrun (runs on luigid have it already).
    """
    os.environ[RUN_STARTED] = str(time.time())
    try:
        if not config.captchaai().follow_plan:
            yield [], None
            return
        with _stewarded(url) as plan:
            yield plan
    finally:
        os.environ.pop(RUN_STARTED, None)


def run_started() -> float | None:
    """When the run this task belongs to started (None outside a run of the CLI)."""
    value = os.environ.get(RUN_STARTED)
    return float(value) if value else None


@contextlib.contextmanager
def _stewarded(url: str | None) -> Iterator[tuple[list[str], SchedulerFactory | None]]:
    global _checked
    seen = None
    if _checked is not None and time.monotonic() - _checked[2] < 5:
        seen = _checked[:2]
    _checked = None
    steward = Steward(url, seen)
    steward.start()
    try:
        yield ([] if url else ["--worker-keep-alive"]), SchedulerFactory(steward.local)
    finally:
        steward.stop()


def describe(url: str | None, threads: int, working: int) -> str:
    """`make plan`'s line on the cap that follows the plan (also said at the start of every run)."""
    global _checked
    _checked = (threads, working, time.monotonic())
    cfg = config.captchaai()
    configured = configured_cap()
    if not cfg.follow_plan:
        return f"cap: follow_plan = false: the cap stays {configured}"
    reading = Reading(threads, working, InFlight(targets.runtime_dir()).count())
    target = target_cap(configured, cfg.spare_threads, reading)
    line = (
        f"cap: {target} of {configured} configured, following the plan "
        f"({why(configured, cfg.spare_threads, reading)}; {reading.own} solves of ours in flight)"
    )
    last = CapLog(targets.store()).last()
    if last is not None:
        line += f"; last change: cap {last['cap']}: {last['reason']}"
    return line


def plan_busy() -> str | None:
    """The governor's verdict once it gave up waiting for a usable thread, for regions to fail on."""
    if not config.captchaai().follow_plan:
        return None
    busy = CapLog(targets.store()).busy()
    return None if busy is None else str(busy.get("reason", "no plan thread usable"))
