"""The Luigi side of the cap that follows the plan (portal_export.governor decides the number).

The cap in force is the `captchaai` resource of the scheduler that grants the slots: luigid's,
set through its `update_resource` RPC (the one the visualiser's Resources page uses), or the local
scheduler's, in this process. Luigi creates the local scheduler inside the run; its documented hook
for that is `luigi.build`'s `worker_scheduler_factory` (tasks/luigi_run.py), which hands the
scheduler over.

Several runs may share one luigid: only one governor sets its cap, the holder of an flock in the
data dir's `_state/` (named for the scheduler's URL); the others wait to take over. The last one
out puts the configured cap back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import luigi
import luigi.configuration
import luigi.scheduler

from portal_export import forksafe
from portal_export.breaker import KeyBreaker
from portal_export.caplog import CapLog
from portal_export.captchaai import CaptchaAI
from portal_export.governor import Governor, Reading, target_cap, why
from portal_export.inflight import InFlight, alive

from . import config
from .luigi_run import WorkerSchedulerFactory
from .scheduler import remote
from .scheduler_url import bare, shown

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


def _scheduler_key(url: str) -> str:
    """One luigid, one key: its URL without credentials (runs with another login share its cap)."""
    return hashlib.sha256(bare(url).rstrip("/").encode()).hexdigest()[:12]


class Steward:
    """Starts a Governor when this run may set the cap, and stops it (restoring the cap) at the end."""

    def __init__(self, url: str | None, seen: tuple[int, int] | None = None) -> None:
        cfg = config.captchaai()
        self.url = url
        self.seen = seen
        self.configured = configured_cap()
        self.state = config.state_dir()
        self.caplog = CapLog(self.state)
        self.inflight = InFlight(self.state)
        self.local = LocalCap()
        self.target: LocalCap | LuigidCap = LuigidCap(url) if url else self.local
        self.where = f"luigid's at {shown(url)}" if url else "the local scheduler's"
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
            with forksafe.guard:  # taking over reads the plan and logs: no fork in the middle
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
        breaker=KeyBreaker(config.state_dir(), key),
    )


@contextlib.contextmanager
def following_plan(url: str | None) -> Iterator[WorkerSchedulerFactory]:
    """Around a run: the worker_scheduler_factory that makes its cap follow the plan.

    Its workers keep alive: a run that finds every captchaai slot taken (on luigid, by other runs;
    locally, held back by the cap) waits its turn instead of exiting with regions unrun.
    """
    os.environ[RUN_STARTED] = str(time.time())
    try:
        if not config.captchaai().follow_plan:
            yield WorkerSchedulerFactory(keep_alive=True if url else None)
            return
        with _stewarded(url) as factory:
            yield factory
    finally:
        os.environ.pop(RUN_STARTED, None)


def run_started() -> float | None:
    """When the run this task belongs to started (None outside a run of the CLI)."""
    value = os.environ.get(RUN_STARTED)
    return float(value) if value else None


@contextlib.contextmanager
def _stewarded(url: str | None) -> Iterator[WorkerSchedulerFactory]:
    global _checked
    seen = None
    if _checked is not None and time.monotonic() - _checked[2] < 5:
        seen = _checked[:2]
    _checked = None
    steward = Steward(url, seen)
    steward.start()
    try:
        yield WorkerSchedulerFactory(on_local=steward.local.attach, keep_alive=True)
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
    state = config.state_dir()
    reading = Reading(threads, working, InFlight(state).count())
    target = target_cap(configured, cfg.spare_threads, reading)
    line = (
        f"cap: {target} of {configured} configured, following the plan "
        f"({why(configured, cfg.spare_threads, reading)}; {reading.own} solves of ours in flight)"
    )
    last = CapLog(state).last()
    if last is not None:
        line += f"; last change: cap {last['cap']}: {last['reason']}"
    return line


def plan_busy() -> str | None:
    """The governor's verdict once it gave up waiting for a usable thread, for regions to fail on."""
    if not config.captchaai().follow_plan:
        return None
    busy = CapLog(config.state_dir()).busy()
    return None if busy is None else str(busy.get("reason", "no plan thread usable"))
