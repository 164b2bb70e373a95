"""One owner of the cap per deployment: `_state/governor/<scheduler key>/<gen:08d>.json` = {"run", "t"}. The newest
generation's run owns the cap while it is alive. A contender creates generation n + 1 only when generation n's run
is dead (`create` is conditional: one wins); an owner that finds a newer generation steps down, so two runs set the
cap for one heartbeat at most."""

from __future__ import annotations

from . import store_keys
from .runs import Runs
from .state import Chain, stamped
from .store import Store

KEEP = 2  # the owner's generation and the one before it


class Lease:
    def __init__(self, store: Store, key: str, runs: Runs, run: str) -> None:
        self.chain = Chain(store, store_keys.governor_lease(key), first=1)  # 0: nobody held it
        self.runs = runs
        self.run = run
        self.gen: int | None = None  # the generation this run holds
        self.previous: str | None = None  # the run it took the lease from

    def newest(self) -> tuple[int, str | None]:
        """(newest generation, its run); (0, None) when nobody ever held the lease."""
        gen = self.chain.newest()
        if gen is None:
            return 0, None
        state = self.chain.read(gen)
        return gen, str(state["run"]) if state is not None and "run" in state else None

    def holder(self) -> str | None:
        _, run = self.newest()
        return run if run is not None and self.runs.alive(run, fresh=True) else None

    def acquire(self) -> bool:
        """Take the lease if its holder is dead; True when this run holds it."""
        gen, run = self.newest()
        if run == self.run:
            self.gen = gen
            return True
        if run is not None and self.runs.alive(run, fresh=True):
            return False
        if not self.chain.create(gen + 1, stamped({"run": self.run})):
            return False  # another contender won this generation
        self.gen, self.previous = gen + 1, run
        self.chain.prune(gen + 1, KEEP)
        return True

    def held(self) -> bool:
        """Still ours: no newer generation was created (one LIST)."""
        return self.gen is not None and self.newest()[0] == self.gen
