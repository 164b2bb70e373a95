"""The CLI runs of a deployment, and which of them still go: `_state/runs/<run id>.json` in the store.

A run id is `<hostname>-<pid>` of the CLI process that stewards the run; the processes it starts
(Luigi's forked tasks) learn it from `RUN_ENV`. The run writes its object, `{"t": wall time, ...}`,
at its start and every heartbeat, and deletes it at its end. A run is alive while its object is
there and
- on this host: its pid is alive (exact, and at once when it dies);
- on another host: its heartbeat is younger than the TTL (a dead host stops beating; after the TTL
  every host sees it dead). Hosts' clocks must agree to well within the TTL, as NTP keeps them.

Hostnames must differ between hosts (Luigi's worker ids and the failure records assume it too).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from .store import Store, read_json, write_json

RUN_ENV = "PORTAL_EXPORT_RUN"
PREFIX = "_state/runs/"
# The TTL is two plan periods (60 s at the default 30 s: luigid's own worker_disconnect_delay, after
# which it frees a dead host's slots too), never under 10 s: a heartbeat stalled that long on a loaded
# host would make its live run look dead, and its solves in flight stop counting against the cap.
MIN_TTL_S = 10.0


def heartbeat_s(plan_every_s: float) -> float:
    """How often a run beats: every half plan period (15 s at the default), a request each."""
    return plan_every_s / 2


def ttl_s(plan_every_s: float) -> float:
    return max(MIN_TTL_S, 2 * plan_every_s)


def this_host() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def current_run() -> str:
    """The run this process belongs to: its CLI's (RUN_ENV), else its own."""
    return os.environ.get(RUN_ENV) or f"{this_host()}-{os.getpid()}"


def split_run(run: str) -> tuple[str, int] | None:
    """(hostname, pid) of a run id; None when it is not one."""
    host, _, pid = run.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() else None


class Runs:
    """The runs' heartbeats in `store`; `alive()` verdicts on other hosts' runs are kept `cache_s`."""

    def __init__(
        self, store: Store, ttl: float = MIN_TTL_S, cache_s: float = 0.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.cache_s = cache_s
        self.clock = clock
        self._seen: dict[str, tuple[bool, float]] = {}  # run -> (verdict, until, on time.monotonic)

    @staticmethod
    def key(run: str) -> str:
        return f"{PREFIX}{run}.json"

    def beat(self, run: str, **fields: Any) -> None:
        write_json(self.store, self.key(run), {**fields, "t": self.clock()})

    def end(self, run: str) -> None:
        self.store.delete(self.key(run))

    def state(self, run: str) -> dict[str, Any] | None:
        try:
            state = read_json(self.store, self.key(run))
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def age(self, run: str, state: dict[str, Any] | None = None) -> float | None:
        """Seconds since the run's last heartbeat (read unless its `state` is given); None when it has none."""
        if state is None:
            state = self.state(run)
        try:
            return None if state is None else self.clock() - float(state["t"])
        except (KeyError, TypeError, ValueError):
            return None

    def _verdict(self, run: str, state: dict[str, Any] | None = None) -> bool:
        """Alive, from the pid on this host and the heartbeat (read unless its `state` is given)."""
        where = split_run(run)
        if where is None:
            return False
        host, pid = where
        local = host == this_host()
        if local and not pid_alive(pid):
            return False  # no request needed
        age = self.age(run, state)
        return age is not None and (local or age < self.ttl)

    def alive(self, run: str, fresh: bool = False) -> bool:
        """Whether `run` still goes; `fresh`: not from the cache (ownership is decided on this)."""
        where = split_run(run)
        if where is None or (where[0] == this_host() and not pid_alive(where[1])):
            return False  # no request needed
        now = time.monotonic()
        seen = self._seen.get(run)
        if seen is not None and not fresh and now < seen[1]:
            return seen[0]
        verdict = self._verdict(run)
        if self.cache_s:
            self._seen[run] = (verdict, now + self.cache_s)
        return verdict

    def live(self, key: str | None = None) -> list[str]:
        """The runs alive now (of scheduler `key`, if given); the objects of dead ones are deleted."""
        found = []
        for name in self.store.list(PREFIX):
            run = name[len(PREFIX) :].removesuffix(".json")
            state = self.state(run)  # one read for the verdict and the key
            if not self._verdict(run, state):
                self.store.delete(name)
                continue
            if key is None or (state or {}).get("key") == key:
                found.append(run)
        return found
