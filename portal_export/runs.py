"""The CLI runs of a deployment, and which of them still go: `_state/runs/<run id>.json` in the store.

A run id is `<hostname>-<pid>` of the CLI process that stewards the run; the processes it starts
(Luigi's forked tasks) learn it from `RUN_ENV`. The run writes its object, `{"t": wall time, ...}`,
at its start and every heartbeat, and deletes it at its end. A run is alive (`state.alive`, the one
verdict) while its object is there and
- on this host: its pid is alive (exact, and at once when it dies);
- on another host: its heartbeat is younger than the TTL (a dead host stops beating; after the TTL
  every host sees it dead). Hosts' clocks must agree to well within the TTL, as NTP keeps them.

Hostnames must differ between hosts (Luigi's worker ids and the failure records assume it too).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from . import keys
from .state import alive, read_dict, stamp_of, stamped
from .state import pid_alive as pid_alive
from .state import split_run as split_run
from .state import this_host as this_host
from .store import Store, write_json

RUN_ENV = "PORTAL_EXPORT_RUN"
PREFIX = keys.RUNS
# The TTL is two plan periods (60 s at the default 30 s: luigid's own worker_disconnect_delay, after
# which it frees a dead host's slots too), never under 10 s: a heartbeat stalled that long on a loaded
# host would make its live run look dead, and its solves in flight stop counting against the cap.
MIN_TTL_S = 10.0


def heartbeat_s(plan_every_s: float) -> float:
    """How often a run beats: every half plan period (15 s at the default), a request each."""
    return plan_every_s / 2


def ttl_s(plan_every_s: float) -> float:
    return max(MIN_TTL_S, 2 * plan_every_s)


def current_run() -> str:
    """The run this process belongs to: its CLI's (RUN_ENV), else its own."""
    return os.environ.get(RUN_ENV) or f"{this_host()}-{os.getpid()}"


class Runs:
    """The runs' heartbeats in `store`; `alive()` verdicts on other hosts' runs are kept `cache_s`."""

    def __init__(
        self, store: Store, ttl: float = MIN_TTL_S, cache_s: float = 0.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.cache_s = cache_s
        self.clock = clock
        self._seen: dict[str, tuple[float | None, float]] = {}  # run -> (age, until, on time.monotonic)

    @staticmethod
    def key(run: str) -> str:
        return keys.run(run)

    def beat(self, run: str, **fields: Any) -> None:
        write_json(self.store, self.key(run), stamped(fields, self.clock()))

    def end(self, run: str) -> None:
        self.store.delete(self.key(run))

    def state(self, run: str) -> dict[str, Any] | None:
        return read_dict(self.store, self.key(run))

    def age(self, run: str, state: dict[str, Any] | None = None) -> float | None:
        """Seconds since the run's last heartbeat (read unless its `state` is given); None when it has none."""
        if state is None:
            state = self.state(run)
        try:
            t = None if state is None else stamp_of(state)
        except (TypeError, ValueError):
            return None
        return None if t is None else self.clock() - t

    def seen_age(self, run: str, fresh: bool = False) -> float | None:
        """`age(run)`, kept `cache_s` (a verdict on it is the same while it is kept); `fresh`: read now."""
        now = time.monotonic()
        seen = self._seen.get(run)
        if seen is not None and not fresh and now < seen[1]:
            return seen[0]
        age = self.age(run)
        if self.cache_s:
            self._seen[run] = (age, now + self.cache_s)
        return age

    def alive(self, run: str, fresh: bool = False) -> bool:
        """Whether `run` still goes; `fresh`: not from the cache (ownership is decided on this)."""
        return alive(run, lambda: self.seen_age(run, fresh), self.ttl)

    def live(self, key: str | None = None) -> list[str]:
        """The runs alive now (of scheduler `key`, if given); the objects of dead ones are deleted."""
        found = []
        for name in self.store.list(PREFIX):
            run = keys.run_of(name)
            state = self.state(run)  # one read for the verdict and the key
            if not alive(run, functools.partial(self.age, run, state), self.ttl):
                self.store.delete(name)
                continue
            if key is None or (state or {}).get("key") == key:
                found.append(run)
        return found
