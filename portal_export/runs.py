"""The CLI runs of a deployment, and which of them still go: `_state/runs/<run id>.json`. A run (its CLI process;
the tasks it forks learn its id from `RUN_ENV`) writes its heartbeat, `{"t", "where": its boot and PID namespace,
...}`, at its start and every `heartbeat_s`, and deletes it at its end. Its ages are read on the store's clock (the
objects' last-modified times against the store's time now), so hosts whose clocks disagree agree on which runs go."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from . import store_keys
from .state import alive, machine, new_run_id, pid_alive, read_dict, split_run, stamped
from .store import Store, write_json

RUN_ENV = "PORTAL_EXPORT_RUN"
# Two plan periods (luigid's worker_disconnect_delay at the default), never under 10 s: a heartbeat
# stalled that long on a loaded host would make a live run look dead.
MIN_TTL_S = 10.0


def heartbeat_s(plan_every_s: float) -> float:
    return plan_every_s / 2


def ttl_s(plan_every_s: float) -> float:
    return max(MIN_TTL_S, 2 * plan_every_s)


_own: dict[int, str] = {}  # pid -> its own run id


def own_run() -> str:
    """The same for every Luigi run of one CLI command; a forked child makes its own."""
    return _own.setdefault(os.getpid(), new_run_id())


def current_run() -> str:
    return os.environ.get(RUN_ENV) or own_run()


class Runs:
    """The runs' heartbeats in `store`; their ages come from one listing, kept `cache_s`."""

    def __init__(self, store: Store, ttl: float = MIN_TTL_S, cache_s: float = 0.0) -> None:
        self.store = store
        self.ttl = ttl
        self.cache_s = cache_s
        self._ages: tuple[dict[str, float], float] = ({}, -float("inf"))  # (run -> age, until on time.monotonic)
        self._here: dict[str, bool] = {}  # run -> on this machine and PID namespace (never changes)

    def beat(self, run: str, **fields: Any) -> None:
        write_json(self.store, store_keys.run(run), stamped({**fields, "where": machine()}))

    def end(self, run: str) -> None:
        self.store.delete(store_keys.run(run))

    def ages(self, fresh: bool = False) -> dict[str, float]:
        now = time.monotonic()
        ages, until = self._ages
        if fresh or now >= until:
            modified, store_now = self.store.written(store_keys.RUNS)
            ages = {store_keys.run_of(k): max(0.0, store_now - t) for k, t in modified.items()}
            self._ages = (ages, now + self.cache_s)
        return ages

    def age(self, run: str) -> float | None:
        return self.ages(fresh=True).get(run)

    def here(self, run: str, state: dict[str, Any] | None = None) -> bool:
        """Its pids are ours: its heartbeat's `where` (read once per run) is this process's."""
        if run == current_run():
            return machine() is not None
        if run not in self._here:
            state = read_dict(self.store, store_keys.run(run)) if state is None else state
            if state is None:
                return False  # no heartbeat (yet, or any more): not known, the heartbeat decides
            self._here[run] = machine() is not None and state.get("where") == machine()
        return self._here[run]

    def alive(self, run: str, fresh: bool = False, pid: int | None = None) -> bool:
        """`state.alive` for `run`; `fresh`: ages read now (ownership is decided on this)."""
        if run == current_run() and pid is None and machine() is not None:
            # our own run beats while its CLI lives: no listing on the way to each submit
            where = split_run(run)
            return where is not None and pid_alive(where[1])
        return alive(run, lambda: self.ages(fresh).get(run), self.ttl, pid=pid, here=lambda: self.here(run))

    def prune_dead(self, key: str | None = None) -> list[str]:
        """Deletes dead runs' heartbeats; returns the live runs (of scheduler `key`, if given)."""
        found = []
        for run, age in self.ages(fresh=True).items():
            state = read_dict(self.store, store_keys.run(run))  # one read for the verdict and the key
            if not alive(run, partial(float, age), self.ttl, here=partial(self.here, run, state)):
                self.store.delete(store_keys.run(run))
                continue
            if key is None or (state or {}).get("key") == key:
                found.append(run)
        return found
