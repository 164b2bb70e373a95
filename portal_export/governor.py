"""The cap follows the plan: which number of solves in flight the live CaptchaAI plan allows.

    cap = min(configured cap, plan threads - spare threads - threads other consumers hold)

`decide` is the whole policy, a pure function; `Governor` reads the plan through the client every
period (and at once when a solve was refused for busy threads) and hands each new cap to a
`set_cap(n, reason)` callback. Who grants slots against that number is the scheduler's business.

Why the policy is asymmetric, and where its dead band comes from:
- Own solves in flight are counted from before their submit until their last poll, once just
  before and once just after `threadsinfo` answers: `own` is every solve seen in either count,
  `steady` those seen in both. Others' share is at least working - own (a lowering on it is never
  a false alarm: it takes effect at once) and taken as working - steady for a rise. Between the two
  the cap stays: solves starting and ending around a reading do not move it.
- Even `steady` can hold an own task CaptchaAI has finished but we have not polled yet, which
  would suggest a rise too early. A rise therefore needs two readings in a row that both allow it,
  half a period apart (readings come every half period while the cap is low, so a rise still
  comes within one period), and goes to the lower of the two.
- `threadsinfo` caps working threads at the plan size: a full reading only says "at least", so it
  never raises the cap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from . import forksafe
from .errors import ExportError

log = logging.getLogger(__name__)

# Cap 0 for this many periods (10 minutes at the default 30 s) and the waiting regions are failed
# with PLAN_BUSY instead of waiting on: a busy plan then shows as a failed run, not a hung one.
ZERO_CAP_PERIODS = 20


@dataclass(frozen=True)
class Reading:
    """One look at the plan: its threads, those working, and this deployment's solves in flight
    (`own` seen around the reading, `steady` throughout it; None: the same as `own`)."""

    threads: int
    working: int
    own: int
    steady: int | None = None

    @property
    def others(self) -> int:
        """Threads other consumers hold, at least."""
        return max(0, self.working - self.own)

    @property
    def others_at_most(self) -> int:
        return max(0, self.working - (self.own if self.steady is None else self.steady))


@dataclass(frozen=True)
class Decision:
    cap: int
    reason: str
    target: int  # what this reading alone allows; the next reading's `proposed`


def target_cap(configured: int, spare: int, reading: Reading, others: int | None = None) -> int:
    """What the plan leaves for this deployment, never above the configured cap."""
    held = reading.others if others is None else others
    return max(0, min(configured, reading.threads - spare - held))


def why(configured: int, spare: int, reading: Reading) -> str:
    """The reason a cap is what it is, in the operator's words."""
    threads, others = reading.threads, reading.others
    if others and reading.working >= threads:
        if reading.own == 0:
            return f"another consumer holds all {threads} plan threads"
        return f"all {threads} plan threads busy, another consumer holds at least {others}"
    if others:
        return f"another consumer holds {others} of {threads} plan threads"
    if threads - spare < configured:
        return f"the plan has {threads} threads, {spare} kept spare"
    return f"the plan leaves {threads - spare}: {threads} threads, {spare} spare, none held by others"


def decide(configured: int, spare: int, reading: Reading, current: int, proposed: int | None) -> Decision:
    """The cap after `reading`, given the cap in force and what the previous reading allowed.

    `proposed` is the previous reading's `target` (None for none): a rise needs both to allow it.
    """
    reason = why(configured, spare, reading)
    generous = target_cap(configured, spare, reading)  # others hold at least reading.others
    if generous < current:
        return Decision(generous, reason, generous)
    target = target_cap(configured, spare, reading, reading.others_at_most)
    saturated = reading.working >= reading.threads
    if target > current and not saturated and proposed is not None and proposed > current:
        return Decision(min(target, proposed), reason, target)
    return Decision(current, reason, target)


class Plan(Protocol):
    def threads(self) -> tuple[int, int]: ...


class Signals(Protocol):
    """What the solves tell the governor: which are in flight, and when one was last refused as busy."""

    def prune_dead(self) -> set[str]: ...

    def last_poke(self) -> float: ...


class Governor:
    """Reads the plan every period and keeps the cap in force where `decide` says.

    `set_cap(n, reason)` is called once at the first reading and then at each change; `blocked(reason)`
    once the cap has been 0 for `ZERO_CAP_PERIODS` periods, and `blocked(None)` when it rises again;
    `on_read(n)` after every reading that answered (solves refused as busy wait for one).
    """

    def __init__(
        self,
        plan: Plan,
        signals: Signals,
        *,
        configured: int,
        spare: int,
        every_s: float,
        set_cap: Callable[[int, str], None],
        blocked: Callable[[str | None], None] = lambda reason: None,
        on_read: Callable[[int], None] = lambda cap: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.signals = signals
        self.configured = configured
        self.spare = spare
        self.every_s = every_s
        self.set_cap = set_cap
        self.blocked = blocked
        self.on_read = on_read
        self.clock = clock
        self.cap: int | None = None
        self._proposed: int | None = None
        self._zero_since: float | None = None
        self._blocked = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def zero_deadline_s(self) -> float:
        return ZERO_CAP_PERIODS * self.every_s

    def read(self, seen: tuple[int, int] | None = None) -> Decision | None:
        """One reading and its decision, applied; None when CaptchaAI did not answer (cap kept).

        `seen`: (threads, working) just read by someone else, instead of asking again.
        """
        before = self.signals.prune_dead()
        try:
            threads, working = seen if seen is not None else self.plan.threads()
        except ExportError as err:
            log.warning("cap: threadsinfo answered %s; the cap stays %s", err, self.cap)
            return None
        after = self.signals.prune_dead()
        reading = Reading(threads, working, len(before | after), len(before & after))
        current = self.configured if self.cap is None else self.cap
        decision = decide(self.configured, self.spare, reading, current, self._proposed)
        self._proposed = decision.target
        if self.cap is None or decision.cap != self.cap:
            self.set_cap(decision.cap, decision.reason)
            self.cap = decision.cap
        self._watch_zero(decision)
        self.on_read(decision.cap)
        return decision

    def _watch_zero(self, decision: Decision) -> None:
        now = self.clock()
        if decision.cap > 0:
            self._zero_since = None
            if self._blocked:
                self._blocked = False
                self.blocked(None)
            return
        if self._zero_since is None:
            self._zero_since = now
        elif not self._blocked and now - self._zero_since >= self.zero_deadline_s:
            self._blocked = True
            self.blocked(f"no plan thread usable for {now - self._zero_since:.0f} s: {decision.reason}")

    def period(self) -> float:
        """Every half period while the cap is below the configured one: a rise needs two readings."""
        return self.every_s / 2 if self.cap is not None and self.cap < self.configured else self.every_s

    def run(self) -> None:
        """Read until stopped: every period, and at once after a solve was refused as busy."""
        poked = self.signals.last_poke()
        while not self._stop.is_set():
            due = self.clock() + self.period()
            while not self._stop.is_set() and self.clock() < due:
                if self.signals.last_poke() != poked:
                    break
                self._stop.wait(min(0.1, self.every_s / 10, max(0.0, due - self.clock())))
            if self._stop.is_set():
                return
            if self.signals.last_poke() != poked:
                poked = self.signals.last_poke()
                self._proposed = None  # a refusal says the last reading was too generous
            with forksafe.guard:  # a reading talks HTTP and logs: no fork in the middle of it
                if self._stop.is_set():
                    return  # stopped while waiting for the guard: by a thread that holds it
                try:
                    self.read()
                except Exception:  # the scheduler did not answer: keep following, next period
                    log.exception("cap: could not apply the plan's reading; trying again next period")

    def start(self, seen: tuple[int, int] | None = None) -> None:
        """The first reading now (the run starts under it), then a daemon thread."""
        with forksafe.guard:
            self.read(seen)
        self._thread = threading.Thread(target=self.run, name="plan-governor", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop reading; `wait=False` from a thread that holds `forksafe.guard` (the reader waits for it)."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(timeout=10)
