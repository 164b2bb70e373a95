"""This deployment's solves in flight, as marks in the store that every host can see: one object per solve,
`_state/inflight/<run id>-<pid>-<n>`, from before its submit until its task ends at CaptchaAI: empty until the submit
is answered, then `{"task": id}`. A mark counts while its process lives. A process that went while CaptchaAI still
worked on its task (stopped, killed, its host dead) leaves its mark: the task holds a plan thread until it ends, so
the mark counts on until a poll (by whoever lists it, on any host, with the key) answers the task ended, or until its
deadline, on the store's clock: `timeout_s` after the submit, `timeout_s + submit_s` after the mark where no task id
came back (the process was killed before the submit's answer). `poke()` asks the governor, on whichever host, for a
plan reading at once."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from . import store_keys
from .errors import ExportError
from .runs import Runs, current_run
from .state import alive, read_dict, serial, stamp_of, stamped
from .store import LocalStore, Store, write_json

log = logging.getLogger(__name__)

# How often a wait lists again: on an object store each look is a paid LIST.
LOCAL_STEP_S = 0.02
REMOTE_STEP_S = 0.25
REMOTE_POKE_EVERY_S = 1.0


class Marks:
    """Marks of one kind (`kind`: their folder), counted over all hosts."""

    kind: str

    def __init__(self, store: Store, runs: Runs | None = None, run: str | None = None) -> None:
        self.store = store
        self.runs = runs if runs is not None else Runs(store, cache_s=1.0)
        self.run = run or current_run()
        self.prefix = store_keys.marks(self.kind)
        self.step_s = LOCAL_STEP_S if isinstance(store, LocalStore) else REMOTE_STEP_S

    def new_key(self) -> str:
        return store_keys.mark(self.kind, self.run, os.getpid(), serial())

    def mark(self, key: str) -> None:
        self.store.write(key, b"")

    def unmark(self, key: str) -> None:
        self.store.delete(key)

    @contextlib.contextmanager
    def marked(self) -> Iterator[None]:
        key = self.new_key()  # named before it is written: a stop at any point after leaves no mark behind
        try:
            self.mark(key)
            yield
        finally:
            self.unmark(key)

    def live(self, name: str, ages: dict[str, dict[str, float]]) -> bool:
        """A mark counts while its process lives; `ages` (empty at first): the runs, listed once for all."""
        run, pid = store_keys.mark_of(name)
        if not pid.isdigit():
            return False

        def age() -> float | None:
            if not ages:
                ages["runs"] = self.runs.ages()
            return ages["runs"].get(run)

        return alive(run, age, self.runs.ttl, pid=int(pid), here=lambda: self.runs.here(run))

    def prune_dead(self) -> set[str]:
        """Deletes the dead marks; returns the live ones, by name."""
        live = set()
        ages: dict[str, dict[str, float]] = {}
        for key in self.store.list(self.prefix):
            name = key[len(self.prefix) :]
            if self.live(name, ages):
                live.add(name)
            else:
                self.store.delete(key)
        return live

    def count(self) -> int:
        return len(self.prune_dead())


@dataclass
class Flight:
    """One solve's mark, told its task once the submit is answered."""

    store: Store | None  # None: a solve no mark counts
    key: str
    task: str | None = None

    def submitted(self, task_id: str) -> None:
        self.task = task_id
        if self.store is not None:
            write_json(self.store, self.key, stamped({"task": task_id}))


@dataclass
class Settle:
    """How the marks a process left are judged: their deadlines, and `ended(task id)` (a poll) every `every_s`."""

    timeout_s: float = 120.0
    submit_s: float = 30.0
    ended: Callable[[str], bool] | None = None
    every_s: float = 5.0
    polled: dict[str, float] = field(default_factory=dict)  # task id -> when this process last polled it

    def due(self, task: str) -> bool:
        now = time.monotonic()
        if self.ended is None or now - self.polled.get(task, -float("inf")) < self.every_s:
            return False
        self.polled[task] = now
        return True


class InFlight(Marks):
    kind = "inflight"
    _poke_seen: tuple[float, float] = (0.0, -float("inf"))  # (value, when read)

    def __init__(self, store: Store, runs: Runs | None = None, run: str | None = None, settle: Settle | None = None):
        super().__init__(store, runs, run)
        self.settle = settle if settle is not None else Settle()
        self._left: dict[str, str | None] = {}  # mark key -> its task id, once its process went (it changes no more)

    @contextlib.contextmanager
    def flying(self, key: str) -> Iterator[Flight]:
        """Within: the solve of mark `key`. Its mark goes at the end, unless the process stops (any exception but
        the export's own) while CaptchaAI works on its task: then it is left to count on. A process killed outright
        leaves its mark as it was."""
        flight = Flight(self.store, key)
        try:
            yield flight
        except BaseException as exc:
            if isinstance(exc, ExportError) or flight.task is None:
                self.unmark(key)
            else:
                log.warning("solve of task %s left in flight: it counts until CaptchaAI ends it", flight.task)
            raise
        self.unmark(key)

    @contextlib.contextmanager
    def flight(self) -> Iterator[Flight]:
        """A solve's mark, written within `flying`: a stop while it is written leaves none without a task."""
        with self.flying(self.new_key()) as flight:
            self.mark(flight.key)
            yield flight

    def standing(self, poll: bool = True) -> tuple[set[str], list[str]]:
        """(names of the marks that count, keys of those whose solve ended); `poll`: ask CaptchaAI where due."""
        counted, ended = set(), []
        ages: dict[str, dict[str, float]] = {}
        written, now = self.store.written(self.prefix)
        for key, modified in written.items():
            name = key[len(self.prefix) :]
            if self.live(name, ages) or self._working(key, now - modified, poll):
                counted.add(name)
            else:
                ended.append(key)
        return counted, ended

    def _working(self, key: str, age: float, poll: bool) -> bool:
        """Whether the task of a mark left by a process that went may still hold a plan thread."""
        if key not in self._left:
            data = self.store.read(key)
            if data is None:
                return False  # deleted since the listing
            with contextlib.suppress(ValueError, TypeError, KeyError):
                self._left[key] = str(json.loads(data)["task"])
            self._left.setdefault(key, None)
        task, settle = self._left[key], self.settle
        if age >= settle.timeout_s + (0.0 if task else settle.submit_s):
            log.info("left solve %s: past its deadline at CaptchaAI, its slot is free", task or "without task id")
            return False
        if task is None or not poll or not settle.due(task):
            return True
        assert settle.ended is not None
        if settle.ended(task):
            log.info("left solve of task %s ended at CaptchaAI: its slot is free", task)
            return False
        return True

    def prune_dead(self, poll: bool = True) -> set[str]:
        """Deletes the marks whose solve ended; returns the others (live and left), by name."""
        counted, ended = self.standing(poll)
        for key in ended:
            self.store.delete(key)
            self._left.pop(key, None)
        return counted

    def poke(self) -> None:
        write_json(self.store, store_keys.PLAN_POKE, stamped({"run": self.run}))
        self._poke_seen = (0.0, -float("inf"))

    def last_poke(self) -> float:
        """When the last poke was (0: none); read every `step_s`, on an object store every second (asked often)."""
        value, read_at = self._poke_seen
        now = time.monotonic()
        if now - read_at < (self.step_s if self.step_s == LOCAL_STEP_S else REMOTE_POKE_EVERY_S):
            return value
        value = 0.0
        with contextlib.suppress(ValueError, TypeError):
            value = stamp_of(read_dict(self.store, store_keys.PLAN_POKE) or {}) or 0.0
        self._poke_seen = (value, now)
        return value
