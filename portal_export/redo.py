"""A day redone: its unsolvable regions set aside to be solved again, and the record of what they counted. `make
retry-unsolvable` and healing share `set_aside`: it works from the health that judged the day, never touches regions
that delivered, and leaves alone a region target written after that health (a redo under way elsewhere). The
counters of `/metrics` never decrease: what a redo takes out is first written under `_state/redone/`, and
`Redone.tally` adds it back once per attempt (its region and task ids)."""

from __future__ import annotations

import contextlib
import datetime
import io
import secrets
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from . import store_keys as keys
from .errors import PermanentError
from .health import read_health
from .region_file import read_facts
from .state import stamped
from .store import Store, write_json

Attempt = tuple[str, tuple[str, ...]]  # (region, CaptchaAI task ids): one attempt at a region
Judged = tuple[dict[str, Any], float, bool]


def new_stamp(now: datetime.datetime | None = None) -> str:
    """UTC time first (a day's records sort by it), then a random part no other host draws."""
    at = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{at:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Outcome:
    """The regions set aside, when the newest of their targets was written (store's clock)."""

    regions: list[str]
    finished_at: float | None = None
    failed_at: float | None = None  # when the day's regions were last written (None: no health judged it)


def judged(store: Store, day: datetime.date, times: Mapping[str, float], complete_too: bool) -> Judged | None:
    """(the health that judged the day, when written, whether the day is complete); None when none did.
    `complete_too`: a complete day's health counts too (retry-unsolvable)."""
    if complete_too:
        health = read_health(store, keys.day_health(day))
        written = store.modified(keys.day_health(day))
        if health is not None and written is not None and store.exists(keys.day_records(day)):
            return health, written, True
    written = times.get(keys.failed_health(day))
    health = None if written is None else read_health(store, keys.failed_health(day))
    return None if health is None or written is None else (health, written, False)


def judged_by(store: Store, key: str, entry: Any, times: Mapping[str, float], judged_at: float) -> bool:
    """The target at `key` (written at `times[key]`) is the unsolvable attempt `entry` of the health written at
    `judged_at`: older, or of the same second (an object store's times are whole seconds) with the same task ids."""
    if not isinstance(entry, dict) or entry.get("status") != "unsolvable":
        return False
    if (written := times.get(key)) is None or written > judged_at:
        return False
    if written < judged_at:
        return True
    try:  # the target's facts line, never its records
        found = read_facts(io.BytesIO(store.read(key) or b""))
    except PermanentError:
        return False
    return bool(found.get("task_ids") == entry.get("task_ids"))


def set_aside(
    store: Store, day: datetime.date, regions: Sequence[str], *, older_than_s: float = 0.0, complete_too: bool = False
) -> Outcome:
    """Set aside the unsolvable regions of the health that judged `day`, if it failed `older_than_s` ago: a record for
    the counters first, then each target copied beside itself and removed, then a complete day's files. Safe on
    several hosts at once. The day failed when its regions were last written (each run rewrites its failed health)."""
    times, now = store.written(keys.region_dir(day))
    found = judged(store, day, times, complete_too)
    if found is None:
        return Outcome([])
    health, judged_at, was_complete = found
    entries = health["regions"] if isinstance(health.get("regions"), dict) else {}
    failed_at = max((times[k] for k in (keys.region(day, r) for r in entries) if k in times), default=judged_at)
    if now - failed_at < older_than_s:
        return Outcome([], failed_at=failed_at)
    unsolvable = [r for r in regions if judged_by(store, keys.region(day, r), entries.get(r), times, judged_at)]
    if not unsolvable:
        return Outcome([], failed_at=failed_at)
    stamp = new_stamp()
    kept = {r: e for r, e in entries.items() if r not in unsolvable and was_complete}
    record = {"day": f"{day:%Y-%m-%d}", "was_complete": was_complete, "kept": kept}
    write_json(store, keys.redone(day, stamp), stamped({**record, "set_aside": {r: entries[r] for r in unsolvable}}))
    for region in unsolvable:
        key = keys.region(day, region)
        if (data := store.read(key)) is not None:
            store.write(keys.set_aside(day, region, stamp), data)
        store.delete(key)
    if was_complete:  # rebuilt with the regions solved again
        for day_key in (keys.day_records(day), keys.day_health(day)):
            store.delete(day_key)
    return Outcome(unsolvable, max(times[keys.region(day, r)] for r in unsolvable), failed_at)


@dataclass
class Tally:
    """What the counters of `/metrics` add up for a set of attempts."""

    solved: int = 0
    unsolvable: int = 0
    submits: int = 0
    refused_tokens: int = 0
    busy_waits: int = 0
    transient_errors: Counter[str] = field(default_factory=Counter)

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @classmethod
    def of_entries(cls, entries: Iterable[Mapping[str, Any]]) -> Tally:
        """From regions' entries of a health record (garbled ones count nothing)."""
        t = cls()
        for e in entries:
            with contextlib.suppress(AttributeError, TypeError, ValueError):
                one = cls(
                    solved=int(e.get("status") == "ok"),
                    unsolvable=int(e.get("status") == "unsolvable"),
                    submits=len(e.get("task_ids") or ()),
                    refused_tokens=int(e.get("refused_tokens") or 0),
                    busy_waits=int(e.get("busy_waits") or 0),
                    transient_errors=Counter(str(c) for c in e.get("transient_errors") or ()),
                )
                t.add(one)
        return t


def attempts(entries: Mapping[str, Any]) -> dict[Attempt, Mapping[str, Any]]:
    """A health's `regions` (or a record's part) by attempt."""
    pairs = entries.items() if isinstance(entries, dict) else ()
    return {(str(name), tuple(str(t) for t in e.get("task_ids") or ())): e for name, e in pairs if isinstance(e, dict)}


@dataclass(frozen=True)
class Redone:
    """A day's redo records, oldest first."""

    records: list[Mapping[str, Any]]

    @property
    def was_complete(self) -> bool:
        return any(r.get("was_complete") is True for r in self.records)

    def tally(self, held: Collection[Attempt] | None) -> Tally | None:
        """What the records add to the counters: the attempts the complete day's health (`held`) does not hold; None
        while it is rebuilt, then the regions its last complete state kept count too. None: never complete."""
        if held is None and not self.was_complete:
            return None
        seen: dict[Attempt, Mapping[str, Any]] = {}
        if held is None:
            last = [r for r in self.records if r.get("was_complete") is True][-1]
            seen.update(attempts(last.get("kept") or {}))
        for record in self.records:
            seen.update(attempts(record.get("set_aside") or {}))
        return Tally.of_entries(e for a, e in seen.items() if a not in (held or ()))
