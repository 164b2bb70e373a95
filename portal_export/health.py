"""A day's solve health, from the facts each region recorded, and its validation."""

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import PermanentError


class DayValidationError(PermanentError):
    """Too many regions given up as unsolvable for the day to count as exported."""


def p95(values: Iterable[float]) -> float | None:
    """95th percentile by nearest rank; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def day_health(day: object, regions: list[str], facts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The health record of one day; `facts` maps each region to its RegionOutcome.to_dict()."""
    per_region = {}
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
        "p95_solve_seconds": p95(r["solve_seconds"] for r in ok),
        "rows": sum(r["rows"] for r in per_region.values()),
        "submits": sum(len(r["task_ids"]) for r in per_region.values()),
        "refused_tokens": sum(r["refused_tokens"] for r in per_region.values()),
        "idle_slot_seconds": sum(r["idle_slot_seconds"] for r in per_region.values()),
        "resent_submits": sum(len(r["resent_submits"]) for r in per_region.values()),
        "regions": per_region,
    }


def validate(health: Mapping[str, Any], max_unsolvable_ratio: float) -> None:
    """Raise DayValidationError when the unsolvable ratio is above the limit."""
    if health["unsolvable_ratio"] > max_unsolvable_ratio:
        raise DayValidationError(
            "TOO_MANY_UNSOLVABLE",
            f"day {health['day']}: {health['unsolvable']} of {len(health['regions'])} regions unsolvable "
            f"({', '.join(health['unsolvable_regions'])}), ratio {health['unsolvable_ratio']:.2f} "
            f"> {max_unsolvable_ratio:g}; re-attempt them with `make retry-unsolvable DAY={health['day']}`",
        )
