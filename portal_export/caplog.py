"""Every change of the cap in force, kept in the data dir's `_state/cap-log/`, and the busy-plan verdict.

One object per change (`t` wall-clock seconds, `cap`, `configured`, `reason`, and the `run` that set
it: `<hostname>-<pid>`, see runs.py): `make plan` shows the last one with its host, and the health
files count from them the time a region (and its day) ran below the configured cap.
`_state/plan-busy.json` exists while the governor has given up waiting for a usable thread: regions
that start then fail at once with PLAN_BUSY instead of being refused.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any, TypedDict

from .store import Store, read_json, write_json

_serial = itertools.count()  # two changes in one microsecond of one process keep two names


class Change(TypedDict, total=False):
    t: float
    cap: int
    configured: int
    reason: str
    run: str  # the run that set it, `<hostname>-<pid>`


def seconds_below(changes: Iterable[Change], start: float, end: float) -> float:
    """Seconds of [start, end] during which the cap in force was below the configured cap."""
    total, below_since = 0.0, None
    for change in sorted(changes, key=lambda c: c["t"]):
        t = min(max(change["t"], start), end)
        if below_since is not None:
            total += t - below_since
        below_since = t if change["cap"] < change["configured"] else None
    if below_since is not None:
        total += end - below_since
    return round(total, 3)


class CapLog:
    """The cap log and the busy verdict in the data dir's store.

    One object per change, `_state/cap-log/<t>-<cap>-<configured>-<run>-<n>.json`: a store has no
    append, and writers on several hosts must not overwrite each other's lines. The name carries
    what `seconds_below` needs, so counting costs one listing, not a read per change.
    """

    PREFIX = "_state/cap-log/"
    BUSY = "_state/plan-busy.json"

    def __init__(self, store: Store) -> None:
        self.store = store

    def note(self, cap: int, configured: int, reason: str, run: str) -> None:
        t = time.time()
        entry: Change = {"t": t, "cap": cap, "configured": configured, "reason": reason, "run": run}
        write_json(self.store, f"{self.PREFIX}{t:017.6f}-{cap}-{configured}-{run}-{next(_serial)}.json", entry)

    def _keys(self) -> list[tuple[Change, str]]:
        out: list[tuple[Change, str]] = []
        for key in self.store.list(self.PREFIX):
            parts = key[len(self.PREFIX) :].removesuffix(".json").split("-", 3)
            try:
                change: Change = {"t": float(parts[0]), "cap": int(parts[1]), "configured": int(parts[2])}
                change["run"] = parts[3].rpartition("-")[0]
            except (IndexError, ValueError):
                continue  # not one of ours
            out.append((change, key))
        return sorted(out, key=lambda ck: ck[0]["t"])

    def changes(self) -> list[Change]:
        """Every change, oldest first, without its reason (read `last()` for that)."""
        return [change for change, _ in self._keys()]

    def last(self) -> Change | None:
        keys = self._keys()
        if not keys:
            return None
        change, key = keys[-1]
        try:
            entry = read_json(self.store, key)
        except ValueError:
            entry = None
        return {**change, "reason": str(entry.get("reason", ""))} if isinstance(entry, dict) else change

    def seconds_below(self, start: float, end: float) -> float:
        return seconds_below(self.changes(), start, end)

    def set_busy(self, reason: str | None) -> None:
        """Declare the plan busy past the deadline (a reason), or no longer (None)."""
        if reason is None:
            self.store.delete(self.BUSY)
            return
        write_json(self.store, self.BUSY, {"reason": reason, "t": time.time()})

    def busy(self) -> dict[str, Any] | None:
        try:
            state = read_json(self.store, self.BUSY)
        except ValueError:
            return None
        return state if isinstance(state, dict) else None
