"""This deployment's solves in flight, as marks in the store that every host can see: one empty object per solve,
`_state/inflight/<run id>-<pid>-<n>`, from before its submit to after its last poll. It counts while its process
lives (`state.alive`); whoever lists a dead one deletes it. `poke()` asks the governor, on whichever host, for a
plan reading at once."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from . import store_keys
from .runs import Runs, current_run
from .state import alive, read_dict, serial, stamp_of, stamped
from .store import LocalStore, Store, write_json

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

    def mark(self) -> str:
        key = store_keys.mark(self.kind, self.run, os.getpid(), serial())
        self.store.write(key, b"")
        return key

    def unmark(self, key: str) -> None:
        self.store.delete(key)

    @contextlib.contextmanager
    def marked(self) -> Iterator[None]:
        key = self.mark()
        try:
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


class InFlight(Marks):
    kind = "inflight"
    _poke_seen: tuple[float, float] = (0.0, -float("inf"))  # (value, when read)

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
