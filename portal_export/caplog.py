"""Every change of the cap in force, in `_state/cap-log/`, and the busy-plan verdict (`_state/plan-busy.json`, there
while the governor has given up waiting for a usable thread: regions then fail at once with PLAN_BUSY). The names
start with the time, so a night lists only its window, from `LOOKBACK_S` before it; the owner notes its cap again
every `RENOTE_S`, so the cap in force at a window's start is within that lookback."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, TypedDict

from . import store_keys
from .state import read_dict, serial, stamped
from .store import Store, write_json

LOOKBACK_S = 6 * 3600.0
RENOTE_S = LOOKBACK_S / 3


class Change(TypedDict, total=False):
    t: float
    cap: int
    configured: int
    reason: str
    run: str


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
    """One object per change (a store has no append; hosts must not overwrite each other's), its name carrying what
    `seconds_below` needs: counting costs one listing, no reads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._noted: float | None = None

    def note(self, cap: int, configured: int, reason: str, run: str) -> None:
        t = time.time()
        entry: Change = {"t": t, "cap": cap, "configured": configured, "reason": reason, "run": run}
        # the serial: two changes in one microsecond of one process keep two names
        write_json(self.store, store_keys.cap_change(t, cap, configured, run, serial()), entry)
        self._noted = t

    def still(self, cap: int, configured: int, run: str) -> None:
        """The owner's cap is still in force: noted again `RENOTE_S` after its last note."""
        if self._noted is not None and time.time() - self._noted >= RENOTE_S:
            self.note(cap, configured, "still in force", run)

    def _keys(self, since: float | None) -> list[tuple[Change, str]]:
        """The changes from `LOOKBACK_S` before `since` on (all when None) and their keys, in the store's order."""
        out: list[tuple[float, Change, str]] = []
        start_after = "" if since is None else store_keys.cap_changes_from(since - LOOKBACK_S)
        for key, _, at in self.store.entries(store_keys.CAP_LOG, start_after):
            if (parsed := store_keys.cap_change_of(key)) is not None:  # else not one of ours
                t, cap, configured, run = parsed
                out.append((at, {"t": t, "cap": cap, "configured": configured, "run": run}, key))
        out.sort(key=lambda entry: (entry[0], entry[1]["t"]))  # within a second of the store's: the writer's order
        return [(change, key) for _, change, key in out]

    def changes(self, since: float | None = None) -> list[Change]:
        """The changes for windows from `since` on (all when None), oldest first, without reasons."""
        return [change for change, _ in self._keys(since)]

    def last(self) -> Change | None:
        """The newest change of the last `LOOKBACK_S`, with its reason."""
        found = self._keys(time.time())
        if not found:
            return None
        change, key = found[-1]
        entry = read_dict(self.store, key)
        return change if entry is None else {**change, "reason": str(entry.get("reason", ""))}

    def set_busy(self, reason: str | None) -> None:
        if reason is None:
            self.store.delete(store_keys.PLAN_BUSY)
            return
        write_json(self.store, store_keys.PLAN_BUSY, stamped({"reason": reason}))

    def busy(self) -> dict[str, Any] | None:
        return read_dict(self.store, store_keys.PLAN_BUSY)
