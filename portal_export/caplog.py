"""Every change of the cap in force, kept in `<state dir>/cap-log.jsonl`, and the busy-plan verdict.

One JSON line per change (`t` wall-clock seconds, `cap`, `configured`, `reason`, `pid`): `make plan` shows
the last one, and the health files count from them the time a region (and its day) ran below the
configured cap. `plan-busy.json` exists while the governor has given up waiting for a usable
thread: regions that start then fail at once with PLAN_BUSY instead of being refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

from .atomic import write_json


class Change(TypedDict, total=False):
    t: float
    cap: int
    configured: int
    reason: str
    pid: int  # of the run that set it


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
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / "cap-log.jsonl"
        self.busy_path = self.dir / "plan-busy.json"

    def note(self, cap: int, configured: int, reason: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        entry = {"t": time.time(), "cap": cap, "configured": configured, "reason": reason, "pid": os.getpid()}
        line = json.dumps(entry)
        with open(self.path, "a") as f:  # one short write per line: appends from several runs stay whole
            f.write(line + "\n")

    def changes(self) -> list[Change]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out: list[Change] = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash
        return out

    def last(self) -> Change | None:
        changes = self.changes()
        return changes[-1] if changes else None

    def seconds_below(self, start: float, end: float) -> float:
        return seconds_below(self.changes(), start, end)

    def set_busy(self, reason: str | None) -> None:
        """Declare the plan busy past the deadline (a reason), or no longer (None)."""
        if reason is None:
            self.busy_path.unlink(missing_ok=True)
            return
        write_json(self.busy_path, {"reason": reason, "t": time.time()})

    def busy(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.busy_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return state
