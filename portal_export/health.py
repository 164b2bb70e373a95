"""A day's solve health, from the facts each region recorded, and its validation."""

import datetime
import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypedDict, cast

from .errors import PermanentError


class DayValidationError(PermanentError):
    """Too many regions given up as unsolvable for the day to count as exported."""


class RegionHealth(TypedDict):
    """One region's entry in a day's health record."""

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


class DayHealth(TypedDict):
    """A day's health record, as written to the day's health file."""

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
    if not ordered:
        return None
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def day_health(
    day: datetime.date | str,
    regions: Collection[str],
    facts: Mapping[str, Mapping[str, Any]],
    seconds_below_cap: float = 0.0,
) -> DayHealth:
    """The health record of one day; `facts` maps each region to its RegionOutcome.to_dict()."""
    # facts are decoded JSON (each region task's output file): their values are typed here, on the way out
    per_region: dict[str, RegionHealth] = {}
    for region in regions:
        f = facts[region]
        per_region[region] = {
            "status": f["status"],
            "rows": f["rows"],
            "task_ids": [str(t) for t in f["task_ids"]],
            "solve_seconds": f["solve_seconds"],
            "attempts": f["attempts"],
            "refused_tokens": f["refused_tokens"],
            "transient_errors": f["transient_errors"],
            "idle_slot_seconds": f["idle_slot_seconds"],
            "resent_submits": f.get("resent_submits", []),
            "busy_waits": f.get("busy_waits", 0),
            "seconds_below_cap": f.get("seconds_below_cap", 0.0),
        }
    ok = [r for r in per_region.values() if r["status"] == "ok"]
    unsolvable = sorted(name for name, r in per_region.items() if r["status"] == "unsolvable")
    return {
        "day": str(day),
        "solves": len(ok),
        "unsolvable": len(unsolvable),
        "unsolvable_regions": unsolvable,
        "unsolvable_ratio": len(unsolvable) / len(regions) if regions else 0.0,
        # an ok region has delivered, so it has its solve's seconds (export_region sets both together)
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
    """Raise DayValidationError when the unsolvable ratio is above the limit."""
    if health["unsolvable_ratio"] > max_unsolvable_ratio:
        raise DayValidationError(
            "TOO_MANY_UNSOLVABLE",
            f"day {health['day']}: {health['unsolvable']} of {len(health['regions'])} regions unsolvable "
            f"({', '.join(health['unsolvable_regions'])}), ratio {health['unsolvable_ratio']:.2f} "
            f"> {max_unsolvable_ratio:g}; re-attempt them with `make retry-unsolvable DAY={health['day']}`",
        )
