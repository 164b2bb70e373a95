"""A day's solve health and its validation (health.py), and the concurrency verdict (governor.py)."""

import json
import random

import pytest

from portal_export.errors import PermanentError
from portal_export.governor import plan_verdict
from portal_export.health import DayValidationError, day_health, p95, validate
from portal_export.retry_policy import RegionOutcome
from sandbox import REGIONS


def outcome(region, status="ok", rows=2, task_ids=("1",), solve_seconds=10.0, **kw):
    out = RegionOutcome(
        "2026-09-01",
        region,
        status=status,
        rows=rows,
        task_ids=list(task_ids),
        solve_seconds=solve_seconds,
        **kw,
    )
    return out.to_dict()


def facts(**overrides):
    base = {r: outcome(r, task_ids=[str(100 + i)], solve_seconds=10.0 + i) for i, r in enumerate(REGIONS)}
    return {**base, **overrides}


# ------------------------------------------------------------------------------------------------ p95


@pytest.mark.parametrize(
    "values, expected",
    [
        (range(1, 21), 19),
        (range(1, 5), 4),
        ([7.5], 7.5),
        (range(1, 101), 95),
        (range(1, 41), 38),
        ([3.0, 1.0, 2.0], 3.0),
    ],
)
def test_p95_by_nearest_rank(values, expected):
    assert p95(values) == expected


def test_p95_is_order_free_and_takes_a_generator():
    values = list(range(1, 21))
    random.Random(1).shuffle(values)
    assert p95(v for v in values) == 19


def test_p95_of_nothing_is_none():
    assert p95([]) is None


def test_p95_rank_matches_exact_integer_arithmetic():
    for n in range(1, 501):
        assert p95(range(1, n + 1)) == -(-95 * n // 100), n  # ceil(0.95 n), no float rounding


# ----------------------------------------------------------------------------------------- day_health


def test_day_health_all_ok():
    f = facts(
        south=outcome(
            "south",
            rows=5,
            task_ids=[7, "8"],
            solve_seconds=30.0,
            attempts=2,
            refused_tokens=1,
            transient_errors=["PORTAL_HTTP_403"],
            idle_slot_seconds=12.5,
        )
    )
    health = day_health("2026-09-01", REGIONS, f)
    assert health["day"] == "2026-09-01"
    assert (health["solves"], health["unsolvable"], health["unsolvable_ratio"]) == (4, 0, 0.0)
    assert health["unsolvable_regions"] == []
    assert health["rows"] == 2 + 5 + 2 + 2
    assert health["submits"] == 5 and health["refused_tokens"] == 1 and health["idle_slot_seconds"] == 12.5
    assert health["p95_solve_seconds"] == 30.0
    assert list(health["regions"]) == list(REGIONS)
    assert health["regions"]["south"] == {
        "status": "ok",
        "rows": 5,
        "task_ids": ["7", "8"],
        "solve_seconds": 30.0,
        "attempts": 2,
        "refused_tokens": 1,
        "transient_errors": ["PORTAL_HTTP_403"],
        "idle_slot_seconds": 12.5,
        "resent_submits": [],  # region files from before these keys read as none
        "busy_waits": 0,
        "seconds_below_cap": 0.0,
    }
    assert health["resent_submits"] == 0 and health["busy_waits"] == 0
    json.dumps(health)  # it is written as JSON


def test_day_health_counts_unsolvable_regions_and_leaves_them_out_of_p95():
    f = facts(
        west=outcome("west", status="unsolvable", rows=0, task_ids=["9", "10"], solve_seconds=None),
        east=outcome("east", status="unsolvable", rows=0, task_ids=["11", "12"], solve_seconds=None),
    )
    health = day_health("2026-09-01", REGIONS, f)
    assert (health["solves"], health["unsolvable"]) == (2, 2)
    assert health["unsolvable_regions"] == ["east", "west"]
    assert health["unsolvable_ratio"] == 0.5
    assert health["p95_solve_seconds"] == 11.0  # of north (10) and south (11) only
    assert health["regions"]["west"]["task_ids"] == ["9", "10"]
    assert health["regions"]["west"]["solve_seconds"] is None
    assert health["rows"] == 4


def test_day_health_all_unsolvable_has_no_p95():
    f = {r: outcome(r, status="unsolvable", rows=0, solve_seconds=None) for r in REGIONS}
    health = day_health("2026-09-01", REGIONS, f)
    assert health["p95_solve_seconds"] is None
    assert health["unsolvable_ratio"] == 1.0 and health["solves"] == 0


def test_day_health_covers_only_the_configured_regions():
    health = day_health("2026-09-01", ["north", "south"], facts())
    assert list(health["regions"]) == ["north", "south"]
    assert health["solves"] == 2


# ------------------------------------------------------------------------------------------- validate


def health_with(unsolvable):
    f = facts(**{r: outcome(r, status="unsolvable", rows=0, solve_seconds=None) for r in unsolvable})
    return day_health("2026-09-01", REGIONS, f)


@pytest.mark.parametrize("unsolvable", [[], ["west"]])
def test_validate_passes_up_to_the_limit(unsolvable):
    assert validate(health_with(unsolvable), 0.25) is None  # 1 of 4 is exactly the limit


def test_validate_fails_above_the_limit():
    with pytest.raises(DayValidationError) as info:
        validate(health_with(["west", "east"]), 0.25)
    assert isinstance(info.value, PermanentError)
    assert info.value.code == "TOO_MANY_UNSOLVABLE"
    message = str(info.value)
    assert "2026-09-01" in message and "east, west" in message and "0.50" in message


def test_validate_with_a_zero_limit_fails_on_one_unsolvable():
    validate(health_with([]), 0.0)
    with pytest.raises(DayValidationError):
        validate(health_with(["north"]), 0.0)


# ----------------------------------------------------------------------------------------- plan_verdict


def test_plan_verdict_accepts_the_default():
    assert plan_verdict(threads=5, cap=4, workers=4) == []
    assert plan_verdict(threads=5, cap=4, workers=8) == []
    assert plan_verdict(threads=20, cap=3, workers=3) == []


@pytest.mark.parametrize("cap", [5, 6])
def test_cap_must_leave_one_spare_thread(cap):
    (problem,) = plan_verdict(threads=5, cap=cap, workers=8)
    assert "spare" in problem and "set it to 4" in problem


def test_workers_must_be_able_to_fill_the_cap():
    (problem,) = plan_verdict(threads=5, cap=4, workers=3)
    assert "3 workers" in problem and ">= 4" in problem


def test_both_problems_at_once():
    assert len(plan_verdict(threads=5, cap=5, workers=2)) == 2
