"""One owner of the cap per deployment: a lease in the data dir's store, through `Store.create`.

`_state/governor/<scheduler key>/<gen:08d>.json` = {"run", "t"}: the newest generation's run owns
the cap while it is alive (`runs.py`). A contender creates generation n + 1 only when the run of
generation n is dead; `create` is conditional, so of two contenders one wins. The owner looks at
each heartbeat whether a newer generation exists and steps down if one does (it was taken for dead:
its heartbeat stalled past the TTL), so two runs set the cap for one heartbeat at most.

When the owner's host dies, its heartbeat ages past the TTL and the next contender's heartbeat takes
the lease: ownership passes within TTL + one heartbeat (runs.py: 60 + 15 s at the default plan
period of 30 s). An owner that ends deletes its heartbeat: the next heartbeat of a contender takes
over.
"""

from __future__ import annotations

import json
import time

from .runs import Runs
from .store import Store, read_json

KEEP = 2  # generations kept: the owner's and the one before it (for the log of who had it)


class Lease:
    def __init__(self, store: Store, key: str, runs: Runs, run: str) -> None:
        self.store = store
        self.prefix = f"_state/governor/{key}/"
        self.runs = runs
        self.run = run
        self.gen: int | None = None  # the generation this run holds
        self.previous: str | None = None  # the run it took the lease from

    def _key(self, gen: int) -> str:
        return f"{self.prefix}{gen:08d}.json"

    def newest(self) -> tuple[int, str | None]:
        """(newest generation, its run); (0, None) when nobody ever held the lease."""
        gens = [int(name[len(self.prefix) :][:8]) for name in self.store.list(self.prefix) if name.endswith(".json")]
        if not gens:
            return 0, None
        gen = max(gens)
        try:
            state = read_json(self.store, self._key(gen))
        except ValueError:
            state = None
        return gen, str(state["run"]) if isinstance(state, dict) and "run" in state else None

    def holder(self) -> str | None:
        """The run that owns the cap now, if it is alive."""
        _, run = self.newest()
        return run if run is not None and self.runs.alive(run, fresh=True) else None

    def acquire(self) -> bool:
        """Take the lease if its holder is dead (or it is ours already); True when this run holds it."""
        gen, run = self.newest()
        if run == self.run:
            self.gen = gen
            return True
        if run is not None and self.runs.alive(run, fresh=True):
            return False
        claim = json.dumps({"run": self.run, "t": time.time()}).encode()
        if not self.store.create(self._key(gen + 1), claim):
            return False  # another contender won this generation
        self.gen, self.previous = gen + 1, run
        for old in range(max(1, gen + 1 - 10), gen + 2 - KEEP):
            self.store.delete(self._key(old))
        return True

    def held(self) -> bool:
        """Still ours: no newer generation was created (one LIST)."""
        return self.gen is not None and self.newest()[0] == self.gen
