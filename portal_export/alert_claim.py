"""One alert per failed run, however many hosts ran it (the same command and days, at the same time): each builds
the alert's `fingerprint` from what failed and claims it with the store's conditional `create`; the first sends it.
A claim covers every run going when it was made (the store's clock on both sides); a later run, a rerun after a fix,
claims the chain's next generation, so the same failure again is alerted again, once. The claim comes before the
sending: a host dying between the two loses that alert, never sends it twice."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from . import store_keys
from .alert_text import RunFacts
from .state import Chain, stamped
from .store import Store

# A claim made this long before a run started still covers it: an object store's times are whole seconds.
SLACK_S = 2.0
KEEP = 2  # claims kept per chain
EARLIER = " (earlier run)"  # a failure older than the host's start: not part of the fingerprint


@dataclass(frozen=True)
class Claim:
    ours: bool  # this host sends the alert
    host: str  # the host that claimed it
    at: float  # when (the store's clock)


def fingerprint(facts: RunFacts, kind: str) -> str:
    """The command, its days, what is missing and why: nothing of one host's own."""
    what: dict[str, Any] = {"kind": kind, "command": facts.command, "stopped": facts.stopped}
    what |= {"days": [str(d) for d in facts.days], "slow": sorted(str(d) for d in facts.slow_days)}
    what["missing"] = [
        {
            "day": str(m.day),
            "regions": {region: code.removesuffix(EARLIER) for region, code in sorted(m.failed_regions.items())},
            "day_code": (m.day_code or "").removesuffix(EARLIER),
            "unsolvable": m.unsolvable_ratio,
        }
        for m in sorted(facts.missing, key=lambda m: m.day)
    ]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def claim(store: Store, fingerprint: str, started: float, host: str, run: str = "") -> Claim:
    """Claim the alert of a run that started at `started` (`state.store_now`). OSError, ValueError or StoreError when
    the store cannot say: the caller then sends (twice rather than never)."""
    chain = Chain(store, store_keys.alert_claims(fingerprint))

    def made(n: int) -> float:
        return store.written(chain.key(n))[0].get(chain.key(n), 0.0)

    newest = chain.newest()
    n = chain.first if newest is None else newest
    record = stamped({"host": host, "run": run})
    while True:
        if n != newest and chain.create(n, record):
            # two kept: a host racing for the one before still finds it taken
            chain.prune(n, KEEP, reach=KEEP)
            return Claim(True, host or "?", made(n))
        other = chain.read(n, tolerate=())  # a garbled claim raises: the caller sends
        if other is not None and (at := made(n)) >= started - SLACK_S:
            return Claim(False, str(other.get("host") or "?"), at)
        n += 1
