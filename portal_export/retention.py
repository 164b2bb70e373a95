"""What the data dir keeps for itself besides the outputs (`_state/` and the failure records, by `KINDS`), and what
of it `keep_state_days` lets go, judged on listings alone. Never touched: outputs, region targets, a live run's objects,
a credential's breaker in use (unknown: none goes), a redone day's record (counted for good), the newest cap-log
change. Heartbeats and marks older than `LIVE_FLOOR_S` are no live run's, whatever `keep_s`. Runs prune a bounded
batch each (`prune_some`, hashed kinds from a random point: all reached over nights); `make prune` all (`prune_all`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from . import store_keys
from .store import Entry, Store

DAY_S = 86400.0
LIVE_FLOOR_S = 3600.0
BATCH = 100  # objects a listing of a nightly prune looks at, per kind
BUDGET = 20  # deletes a nightly prune makes at most, all kinds together


@dataclass(frozen=True)
class Kind:
    name: str  # as `make state` prints it
    prefix: str
    hashed: bool = False  # names start with a hex hash


CAP_LOG = Kind("cap-log", store_keys.CAP_LOG)
ALERTS = Kind("alert-claims", store_keys.ALERTS, hashed=True)
BREAKERS = Kind("breakers", store_keys.BREAKERS, hashed=True)
LEASES = Kind("leases", store_keys.GOVERNOR, hashed=True)
RUNS = Kind("heartbeats", store_keys.RUNS)
INFLIGHT = Kind("inflight-marks", store_keys.INFLIGHT)
WAITING = Kind("waiting-marks", store_keys.WAITING)
FAILURES = Kind("failure-records", store_keys.REGIONS)  # regions/<day>/failures/: listed by `make prune` only
REDONE = Kind("redone-days", store_keys.REDONE)  # what redos took out of the counters (`redo.py`): kept for good
OTHER = Kind("other-state", store_keys.STATE)  # cap.json, plan-poke.json, plan-busy.json: one each, kept
KINDS = (CAP_LOG, ALERTS, BREAKERS, LEASES, RUNS, INFLIGHT, WAITING, FAILURES, REDONE, OTHER)
NIGHTLY = (CAP_LOG, ALERTS, BREAKERS, LEASES)  # dead runs and marks go when listed


@dataclass
class Policy:
    """Now, how long state is kept, the runs with a heartbeat, the breakers in use (None: unknown)."""

    now: float
    keep_s: float
    live_runs: set[str] = field(default_factory=set)
    breakers_in_use: set[str] | None = None

    @property
    def cutoff(self) -> float:
        return self.now - self.keep_s

    def removable(self, kind: Kind, found: list[Entry], complete: bool) -> list[str]:
        """The keys of `found` (a listing of `kind`) that may go; `complete`: it ran to its end (last chain whole)."""
        old = [e.key for e in found if e.modified < self.cutoff]
        if kind is CAP_LOG:  # old changes of no run with a heartbeat; the listing's newest stays (it may be in force)
            changes = [(e.key, store_keys.cap_change_of(e.key)) for e in found[:-1]]  # None: not one of ours
            return [k for k, c in changes if c is not None and c[0] < self.cutoff and c[3] not in self.live_runs]
        if kind is ALERTS:
            return old
        if kind is BREAKERS:
            return [] if self.breakers_in_use is None else [k for k in old if k not in self.breakers_in_use]
        if kind is LEASES:
            return self._leases(found, complete)
        if kind in (RUNS, INFLIGHT, WAITING):
            dead_cutoff = self.now - max(self.keep_s, LIVE_FLOOR_S)
            run_of = store_keys.run_of if kind is RUNS else lambda k: store_keys.mark_of(k[len(kind.prefix) :])[0]
            return [e.key for e in found if e.modified < dead_cutoff and run_of(e.key) not in self.live_runs]
        if kind is FAILURES:
            return [k for k in old if is_failure_record(k)]
        return []

    def _leases(self, found: list[Entry], complete: bool) -> list[str]:
        """Old generations; a chain's newest only when no run has a heartbeat and it was listed whole."""
        chains: dict[str, list[Entry]] = {}
        for entry in found:
            chains.setdefault(entry.key.rpartition("/")[0], []).append(entry)
        out = []
        for i, (*older, newest) in enumerate(chains.values()):
            out += [e.key for e in older if e.modified < self.cutoff]
            if newest.modified < self.cutoff and not self.live_runs and (complete or i < len(chains) - 1):
                out.append(newest.key)
        return out


def is_failure_record(key: str) -> bool:
    parts = key[len(store_keys.REGIONS) :].split("/")
    return len(parts) == 3 and parts[1] == "failures" and parts[2].endswith(".json")


def live_runs(store: Store) -> set[str]:
    """The runs with a heartbeat object: their objects stay, alive or not yet judged."""
    return {store_keys.run_of(key) for key in store.list(store_keys.RUNS)}


def _listings(store: Store, kind: Kind) -> Iterator[tuple[list[Entry], bool]]:
    """One bounded look at `kind`, as (listing, whether it ran to its end): a hashed kind from a random point, wrapping
    round to its start (a chain's names share its hash: the point splits none)."""
    if not kind.hashed:
        found = store.entries(kind.prefix, limit=BATCH)
        yield found, len(found) < BATCH
        return
    start = f"{kind.prefix}{random.getrandbits(16):04x}"
    after = store.entries(kind.prefix, start_after=start, limit=BATCH)
    yield after, len(after) < BATCH
    room = BATCH - len(after)
    if room > 0:
        raw = store.entries(kind.prefix, limit=room)
        before = [e for e in raw if e.key <= start]
        yield before, len(raw) < room or len(before) < len(raw)


def prune_some(store: Store, policy: Policy) -> dict[str, int]:
    """A run's share: a bounded listing per kind, `BUDGET` deletes in all. Returns them by kind."""
    budget = BUDGET
    done: dict[str, int] = {}
    for kind in NIGHTLY:
        for found, complete in _listings(store, kind):
            for key in policy.removable(kind, found, complete)[:budget]:
                store.delete(key)
                done[kind.name] = done.get(kind.name, 0) + 1
                budget -= 1
            if budget <= 0:
                return done
    return done


def prune_all(
    store: Store,
    policy: Policy,
    delete: bool = True,
    batch: int = 1000,
    say: Callable[[Kind, list[str]], None] | None = None,
) -> dict[str, int]:
    """Everything `policy` lets go, `batch` listed at a time (`delete=False`: only counted and said), by kind."""
    done: dict[str, int] = {}
    for kind in [k for k in KINDS if k is not OTHER]:  # other-state: one object each, kept
        after = ""
        while True:
            found = store.entries(kind.prefix, start_after=after, limit=max(2, batch))
            complete = len(found) < max(2, batch)
            gone = policy.removable(kind, found, complete)
            if say is not None and gone:
                say(kind, gone)
            for key in gone if delete else ():
                store.delete(key)
            done[kind.name] = done.get(kind.name, 0) + len(gone)
            if complete:
                break
            # a cap-log change or lease generation is judged by what follows it: the last again
            after = found[-2].key if kind in (CAP_LOG, LEASES) else found[-1].key
    return done


@dataclass
class Tally:
    count: int = 0
    oldest: float | None = None
    size: int = 0

    def add(self, entry: Entry) -> None:
        self.count += 1
        self.size += entry.size
        self.oldest = entry.modified if self.oldest is None else min(self.oldest, entry.modified)


def kind_of(key: str) -> Kind | None:
    """None for an output or region target."""
    if key.startswith(store_keys.REGIONS):
        return FAILURES if is_failure_record(key) else None
    for kind in KINDS:
        if kind not in (FAILURES, OTHER) and key.startswith(kind.prefix):
            return kind
    return OTHER if key.startswith(store_keys.STATE) else None


def survey(store: Store) -> dict[str, Tally]:
    """Every kind's count, oldest and bytes (`make state`)."""
    tallies = {kind.name: Tally() for kind in KINDS}
    for prefix in (store_keys.STATE, store_keys.REGIONS):
        for entry in store.entries(prefix):
            if (kind := kind_of(entry.key)) is not None:
                tallies[kind.name].add(entry)
    return tallies
