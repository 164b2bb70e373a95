"""What the data dir keeps for itself besides the outputs, and what of it `keep_state_days` lets go.

Everything under `_state/` and the failure records, by kind (`KINDS`, all spelled in `store_keys.py`).
Outputs and region targets are never touched; neither is a live run's object (its heartbeat, its
marks, the cap-log changes it noted), the breaker of a credential in use now, nor a redone day's
record (the counters of `/metrics` hold it for good: one small object per redo).

What may go, past `keep_s` since it was last written (its time in a listing: nothing is read):
- cap-log changes, except the newest (the cap in force) and those of runs with a heartbeat;
- alert claims (the run they covered ended long ago: the same failure again is alerted again);
- breakers of credentials no longer in use (a rotated key, a changed login). A breaker is open
  until `make clear-breaker`, so "no longer open" means: no credential this deployment holds now
  can be refused by it. When the key in use is not known, no breaker goes;
- lease generations: all but the newest of a scheduler's chain; the newest too when no run has a
  heartbeat (its scheduler's runs ended: a new run starts the chain again);
- heartbeats and marks of dead runs, also past `LIVE_FLOOR_S` (a live run beats every few seconds
  and a solve lasts minutes: an object that old is no live run's, whatever `keep_s` is);
- failure records of days that never completed (a completed day's are removed by its task).

Runs remove it themselves, a bounded batch each (`prune_some`): one listing per kind, starting
after the oldest cap-log change or at a random point of the kinds whose names are hashes (so
every object is reached over the nights), and at most `budget` deletes; `make prune` removes all
of it in batches (`prune_all`). Neither ever lists the outputs, save `make prune`'s failure
records, and `make state` (`survey`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from . import store_keys
from .store import Entry, Store

DAY_S = 86400.0
LIVE_FLOOR_S = 3600.0
BATCH = 100  # objects a listing of a nightly prune looks at, per kind
BUDGET = 20  # deletes a nightly prune makes at most, all kinds together
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Kind:
    name: str  # as `make state` prints it
    prefix: str
    hashed: bool = False  # names start with a hex hash: a random start reaches every part over nights


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
NIGHTLY = (CAP_LOG, ALERTS, BREAKERS, LEASES)  # runs' and marks' own listings remove dead ones at once


def keep_seconds(keep_state_days: float) -> float:
    return keep_state_days * DAY_S


@dataclass
class Policy:
    """What decides: now, how long state is kept, the runs with a heartbeat (listed once), and the
    breaker names of the credentials in use (None: unknown, so every breaker stays)."""

    now: float
    keep_s: float
    live_runs: set[str] = field(default_factory=set)
    breakers_in_use: set[str] | None = None

    @property
    def cutoff(self) -> float:
        return self.now - self.keep_s

    @property
    def dead_cutoff(self) -> float:
        return self.now - max(self.keep_s, LIVE_FLOOR_S)

    def removable(self, kind: Kind, found: list[Entry], complete: bool) -> list[str]:
        """The keys of `found` (one listing of `kind`, in key order) that may go. `complete`: the
        listing ran to the end of what it covers, so its last lease chain is whole (its newest
        generation listed); a cap-log listing's last change is kept either way."""
        if kind is CAP_LOG:
            return self._cap_log(found)
        if kind is ALERTS:
            return [e.key for e in found if e.modified < self.cutoff]
        if kind is BREAKERS:
            if self.breakers_in_use is None:
                return []
            return [e.key for e in found if e.modified < self.cutoff and e.key not in self.breakers_in_use]
        if kind is LEASES:
            return self._leases(found, complete)
        if kind is RUNS:
            return [
                e.key for e in found if e.modified < self.dead_cutoff and store_keys.run_of(e.key) not in self.live_runs
            ]
        if kind in (INFLIGHT, WAITING):
            return [
                e.key
                for e in found
                if e.modified < self.dead_cutoff
                and store_keys.mark_of(e.key[len(kind.prefix) :])[0] not in self.live_runs
            ]
        if kind is FAILURES:
            return [e.key for e in found if is_failure_record(e.key) and e.modified < self.cutoff]
        return []

    def _cap_log(self, found: list[Entry]) -> list[str]:
        """Changes older than the cutoff, of no run with a heartbeat, and each followed by a later one
        (the newest of the listing stays: it may be the cap in force)."""
        out = []
        for entry in found[:-1]:
            parsed = store_keys.cap_change_of(entry.key)
            if parsed is None:
                continue  # not one of ours
            t, _, _, run = parsed
            if t < self.cutoff and run not in self.live_runs:
                out.append(entry.key)
        return out

    def _leases(self, found: list[Entry], complete: bool) -> list[str]:
        """Old generations; a chain's newest only when no run has a heartbeat. A chain whose newest
        may lie past the listing keeps its last listed one."""
        chains: dict[str, list[Entry]] = {}
        for entry in found:
            chains.setdefault(entry.key.rpartition("/")[0], []).append(entry)
        out = []
        for i, generations in enumerate(chains.values()):
            last_listed = i == len(chains) - 1
            older, newest = generations[:-1], generations[-1]
            out += [e.key for e in older if e.modified < self.cutoff]
            if newest.modified < self.cutoff and not self.live_runs and (complete or not last_listed):
                out.append(newest.key)
        return out


def is_failure_record(key: str) -> bool:
    """regions/<day>/failures/<name>.json: a failure record, never a region target."""
    parts = key[len(store_keys.REGIONS) :].split("/")
    return len(parts) == 3 and parts[1] == "failures" and parts[2].endswith(".json")


def live_runs(store: Store) -> set[str]:
    """The runs with a heartbeat object (one listing): their objects stay, alive or not yet judged."""
    return {store_keys.run_of(key) for key in store.list(store_keys.RUNS)}


# ----------------------------------------------------------------------------------- nightly


def _listings(store: Store, kind: Kind, rng: random.Random, batch: int = BATCH) -> Iterator[tuple[list[Entry], bool]]:
    """One bounded look at `kind`, as (listing, whether it ran to the end of what it covers: its
    last object's chain is whole). The oldest cap-log changes first; a hashed kind from a random
    point, wrapping round to its start (a chain's names share its hash: the point splits none)."""
    if not kind.hashed:
        found = store.entries(kind.prefix, limit=batch)
        yield found, len(found) < batch
        return
    start = kind.prefix + "".join(rng.choice(HEX) for _ in range(4))
    after = store.entries(kind.prefix, start_after=start, limit=batch)
    yield after, len(after) < batch
    room = batch - len(after)
    if room <= 0:
        return
    raw = store.entries(kind.prefix, limit=room)
    before = [e for e in raw if e.key <= start]
    yield before, len(raw) < room or len(before) < len(raw)


def prune_some(
    store: Store,
    policy: Policy,
    budget: int = BUDGET,
    kinds: Iterable[Kind] = NIGHTLY,
    rng: random.Random | None = None,
) -> dict[str, int]:
    """A run's share of the pruning: per kind one bounded listing (two for a hashed kind that wraps
    round), at most `budget` deletes in all. Returns the deletes by kind's name."""
    rng = rng or random.Random()
    done: dict[str, int] = {}
    for kind in kinds:
        for found, complete in _listings(store, kind, rng):
            for key in policy.removable(kind, found, complete)[:budget]:
                store.delete(key)
                done[kind.name] = done.get(kind.name, 0) + 1
                budget -= 1
            if budget <= 0:
                return done
    return done


# ---------------------------------------------------------------------------------- make prune


def prune_all(
    store: Store,
    policy: Policy,
    delete: bool = True,
    batch: int = 1000,
    say: Callable[[Kind, list[str]], None] | None = None,
) -> dict[str, int]:
    """Everything `policy` lets go, kind by kind, a listing of at most `batch` objects at a time and
    its removable part deleted before the next (`delete=False`: only counted, and said). Returns
    what went (or would go) by kind's name."""
    done: dict[str, int] = {}
    for kind in KINDS:
        if kind is OTHER:
            continue  # one object each, kept
        after = ""
        while True:
            found = store.entries(kind.prefix, start_after=after, limit=max(2, batch))
            complete = len(found) < max(2, batch)
            gone = policy.removable(kind, found, complete)
            if say is not None and gone:
                say(kind, gone)
            if delete:
                for key in gone:
                    store.delete(key)
            done[kind.name] = done.get(kind.name, 0) + len(gone)
            if complete:
                break
            # a cap-log change or lease generation is judged by what follows it: the batch's last,
            # kept for want of that, is judged again with the next batch
            after = found[-2].key if kind in (CAP_LOG, LEASES) else found[-1].key
    return done


# ----------------------------------------------------------------------------------- make state


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
    """The kind of an object under `_state/` or a failure record; None for an output or region target."""
    if key.startswith(store_keys.REGIONS):
        return FAILURES if is_failure_record(key) else None
    for kind in KINDS:
        if kind not in (FAILURES, OTHER) and key.startswith(kind.prefix):
            return kind
    return OTHER if key.startswith(store_keys.STATE) else None


def survey(store: Store) -> dict[str, Tally]:
    """Every kind's count, oldest and bytes: one listing of `_state/`, one of the region folders."""
    tallies = {kind.name: Tally() for kind in KINDS}
    for prefix in (store_keys.STATE, store_keys.REGIONS):
        for entry in store.entries(prefix):
            kind = kind_of(entry.key)
            if kind is not None:
                tallies[kind.name].add(entry)
    return tallies
