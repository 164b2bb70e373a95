"""This deployment's solves in flight, counted through small files every run and task can see.

Tasks run in forked processes, and several runs may share one data dir, so the count lives in
`<state dir>/inflight/`: one empty file per solve, named `<pid>-<n>`, created before its submit and
removed after its last poll. A file whose process is gone is not counted (and is removed), so a
killed task does not count forever. The governor subtracts this count from the plan's working
threads to find what other consumers hold.

`poke()` is how a solve refused for busy threads asks the governor for a reading at once.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

_serial = itertools.count()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class InFlight:
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir) / "inflight"
        self.poke_path = Path(state_dir) / "plan-poke"

    @contextlib.contextmanager
    def solving(self) -> Iterator[None]:
        """Counts one solve for as long as the block runs."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{os.getpid()}-{next(_serial)}"
        path.touch()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)

    def names(self) -> set[str]:
        """The solves in flight now, by file name; those of dead processes are dropped."""
        try:
            names = [p.name for p in self.dir.iterdir()]
        except FileNotFoundError:
            return set()
        live = set()
        for name in names:
            pid = name.split("-", 1)[0]
            if not pid.isdigit():
                continue
            if alive(int(pid)):
                live.add(name)
            else:
                (self.dir / name).unlink(missing_ok=True)
        return live

    def count(self) -> int:
        return len(self.names())

    def poke(self) -> None:
        """Ask for a plan reading now (a submit was refused for busy threads)."""
        self.poke_path.parent.mkdir(parents=True, exist_ok=True)
        self.poke_path.write_text(str(os.getpid()))

    def last_poke(self) -> float:
        try:
            return self.poke_path.stat().st_mtime_ns / 1e9
        except FileNotFoundError:
            return 0.0
