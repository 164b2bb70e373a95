"""A day's solve health, from its regions' facts, and its validation; the health records in the
store, found and read: the one reader for the report, the metrics and redo."""

import datetime
import logging
import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypedDict, cast

from . import store_keys
from .errors import PermanentError
from .store import Store, read_json

log = logging.getLogger(__name__)


class DayValidationError(PermanentError):
    """Too many regions given up as unsolvable for the day to count as exported."""


class RegionHealth(TypedDict):
    status: str  # "ok" or "unsolvable"
    rows: int
    task_ids: list[str]
    solve_seconds: float | None  # of the delivering solve; None when unsolvable
    attempts: int
    refused_tokens: int
    transient_errors: list[str]
    idle_slot_seconds: float  # backoff waits (the region lent its slot to another meanwhile)
    resent_submits: list[str]  # submits the service failed explicitly and the client sent again
    busy_waits: int  # submits refused for busy threads and waited out, no attempt spent
    seconds_below_cap: float  # while the region ran, the cap in force was below [resources] captchaai


# what a region's facts may lack (those of an older RegionOutcome)
_OPTIONAL: dict[str, Any] = {"resent_submits": [], "busy_waits": 0, "seconds_below_cap": 0.0}


class DayHealth(TypedDict):
    day: str
    solves: int
    unsolvable: int
    unsolvable_regions: list[str]
    unsolvable_ratio: float
    p95_solve_seconds: float | None
    rows: int
    submits: int
    refused_tokens: int
    idle_slot_seconds: float
    resent_submits: int
    busy_waits: int
    seconds_below_cap: float  # the orchestrator's count: it knows when its run started
    regions: dict[str, RegionHealth]


def p95(values: Iterable[float]) -> float | None:
    """95th percentile by nearest rank; None for no values."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1] if ordered else None


def day_health(
    day: datetime.date | str,
    regions: Collection[str],
    facts: Mapping[str, Mapping[str, Any]],
    seconds_below_cap: float = 0.0,
) -> DayHealth:
    """The health record of one day; `facts` maps each region to its RegionOutcome.to_dict()."""
    per_region: dict[str, RegionHealth] = {}
    for region in regions:
        f = {**_OPTIONAL, **facts[region], "task_ids": [str(t) for t in facts[region]["task_ids"]]}
        per_region[region] = cast(RegionHealth, {k: f[k] for k in RegionHealth.__annotations__})
    ok = [r for r in per_region.values() if r["status"] == "ok"]
    unsolvable = sorted(name for name, r in per_region.items() if r["status"] == "unsolvable")
    return {
        "day": str(day),
        "solves": len(ok),
        "unsolvable": len(unsolvable),
        "unsolvable_regions": unsolvable,
        "unsolvable_ratio": len(unsolvable) / len(regions) if regions else 0.0,
        "p95_solve_seconds": p95(cast(float, r["solve_seconds"]) for r in ok),
        "rows": sum(r["rows"] for r in per_region.values()),
        "submits": sum(len(r["task_ids"]) for r in per_region.values()),
        "refused_tokens": sum(r["refused_tokens"] for r in per_region.values()),
        "idle_slot_seconds": sum(r["idle_slot_seconds"] for r in per_region.values()),
        "resent_submits": sum(len(r["resent_submits"]) for r in per_region.values()),
        "busy_waits": sum(r["busy_waits"] for r in per_region.values()),
        "seconds_below_cap": seconds_below_cap,
        "regions": per_region,
    }


def validate(health: DayHealth, max_unsolvable_ratio: float) -> None:
    if health["unsolvable_ratio"] > max_unsolvable_ratio:
        raise DayValidationError(
            "TOO_MANY_UNSOLVABLE",
            f"day {health['day']}: {health['unsolvable']} of {len(health['regions'])} regions unsolvable "
            f"({', '.join(health['unsolvable_regions'])}), ratio {health['unsolvable_ratio']:.2f} "
            f"> {max_unsolvable_ratio:g}; a run [portal] heal_after_hours later solves them again, "
            f"`make retry-unsolvable DAY={health['day']}` now",
        )


def health_keys(store: Store) -> list[tuple[datetime.date, str, str]]:
    """(day, "ok" | "failed", key) of every health record; a name that spells no valid day is skipped."""
    found: list[tuple[datetime.date, str, str]] = []
    for key in store.list(store_keys.DAY_PREFIX):
        if not key.endswith(store_keys.HEALTH_SUFFIX) or "/" in key:
            continue
        parsed = store_keys.day_of(key)
        if parsed is None or parsed[1] != store_keys.HEALTH_SUFFIX:
            log.warning("skipped %s: its name holds no valid YYYY-MM-DD day", store.location(key))
            continue
        found.append((parsed[0], "ok", key))
    for key in store.list(store_keys.REGIONS):
        if key.count("/") != 2 or not key.endswith(f"/{store_keys.FAILED_HEALTH}"):
            continue
        day = store_keys.failed_health_day(key)
        if day is None:
            log.warning("skipped %s: its directory name is no valid YYYY-MM-DD day", store.location(key))
            continue
        found.append((day, "failed", key))
    return found


def read_health(store: Store, key: str, tolerate: tuple[type[Exception], ...] = (ValueError,)) -> dict[str, Any] | None:
    """The health record at `key`; None when there is none, or (with a warning) when it is garbled,
    of another shape, or its read raised one of `tolerate`."""
    try:
        health = read_json(store, key)
    except tolerate as err:
        log.warning("skipped malformed health file %s: %s", store.location(key), err)
        return None
    if health is not None and not isinstance(health, dict):
        shape = type(health).__name__
        log.warning("skipped malformed health file %s: a JSON object was expected, not %s", store.location(key), shape)
        return None
    return health
