"""One alert per failed run, however many hosts ran it: the first host to claim the alert sends it.

Hosts that run the same command on the same days at the same time (cron at 03:00 on each, a host
joining a backfill) are one run: they share luigid and the data dir, and each ends by reading the
same failure records. Each builds the alert's fingerprint from what failed (`fingerprint`) and
claims it with the store's conditional `create`: the one that creates the claim sends the alert,
the others print who sent it.

A claim covers every run that was going when it was made: a run that started later (tomorrow's,
or the operator's rerun after a fix) is a new run, and claims the next key of the fingerprint's
chain (`_state/alerts/<fingerprint>/<n>.json`), so the same failure again is alerted again, once.
"When" is the store's clock on both sides (`state.store_now` at the run's start, the claim's
last-modified time): hosts' clocks may disagree by minutes, and none of them enters.
Only the two newest claims of a chain are kept, and `retention.py` removes claims older than
`keep_state_days`. The claim comes before the sending: a host dying between the two loses that
alert (at most once, never twice).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import store_keys
from .alert_text import RunFacts
from .state import Chain, stamped
from .store import Store

PREFIX = store_keys.ALERTS
# A claim made this long before a run started (on the store's clock) still covers it: an object
# store's times are whole seconds. Hosts of one run start within seconds of each other and claim at
# its end; runs of a command start hours apart.
SLACK_S = 2.0
KEEP = 2  # claims kept per chain
EARLIER = " (earlier run)"  # how a host marks a failure older than its own start: not part of the fingerprint


@dataclass(frozen=True)
class Claim:
    ours: bool  # this host sends the alert
    host: str  # the host that claimed it
    at: float  # when (the store's clock)


def fingerprint(facts: RunFacts, kind: str) -> str:
    """What identifies the alert across hosts: the command, its days, and what is missing and why.

    Nothing of one host's own (its exit code, start, plan check, data dir path) enters it.
    """
    missing = [
        {
            "day": str(m.day),
            "regions": {region: code.removesuffix(EARLIER) for region, code in sorted(m.failed_regions.items())},
            "day_code": (m.day_code or "").removesuffix(EARLIER),
            "unsolvable": m.unsolvable_ratio,
        }
        for m in sorted(facts.missing, key=lambda m: m.day)
    ]
    what = {
        "kind": kind,
        "command": facts.command,
        "days": [str(d) for d in facts.days],
        "missing": missing,
        "slow": sorted(str(d) for d in facts.slow_days),
        "stopped": facts.stopped,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def _claim_of(record: Mapping[str, Any], at: float, ours: bool = False) -> Claim:
    return Claim(ours, str(record.get("host") or "?"), at)


def claim(store: Store, fingerprint: str, started: float, host: str, run: str = "") -> Claim:
    """Claim the alert of a run that started at `started` (the store's clock: `state.store_now`).

    OSError, ValueError or StoreError when the store cannot say: the caller then sends (twice rather
    than never).
    """
    chain = Chain(store, store_keys.alert_claims(fingerprint))

    def made(n: int) -> float:
        """When generation `n` was created, on the store's clock (it is never rewritten)."""
        return store.written(chain.key(n))[0].get(chain.key(n), 0.0)

    newest = chain.newest()
    n = chain.first
    if newest is not None:
        last = chain.read(newest, tolerate=())  # a garbled claim raises: the caller sends
        if last is not None and (at := made(newest)) >= started - SLACK_S:
            return _claim_of(last, at)
        n = newest + 1
    record = stamped({"host": host, "run": run})  # `t`: the claimant's clock, for people
    while True:
        if chain.create(n, record):
            # the chain keeps its two newest claims (a host racing for the one before still finds it
            # taken): a failure alerted every night lists two objects, not one per night
            chain.prune(n, KEEP, reach=KEEP)
            return _claim_of(record, made(n), ours=True)
        other = chain.read(n, tolerate=())
        if other is not None and (at := made(n)) >= started - SLACK_S:
            return _claim_of(other, at)
        n += 1
