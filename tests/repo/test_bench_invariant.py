"""The cap invariant through the real CLI, and the bench's measures on hand-computed examples.

The backfill test runs `python -m ops backfill` against the sandbox exactly as `make bench` does
(bench/runner.py), with more Luigi workers than the cap, so only the `captchaai` resource can hold
the solves in flight to the cap; and it must reach it, or the cap would be wasted paid threads.
"""

import datetime

import pytest

from bench import fleet, metrics, runner, table
from bench.config import Case

FP, EVERY = 1.5, 0.5  # the bench's poll schedule


@pytest.mark.unmeasured
def test_backfill_through_the_cli_keeps_solves_in_flight_at_the_cap(tmp_path):
    # Solves of 0.5 s, polled at 0.3 s then every 0.1 s: 8 regions at cap 2 take about 3 s.
    case = Case(
        "invariant",
        "luigi",
        n_days=2,
        cap=2,
        workers=4,
        first_day=datetime.date(2026, 1, 1),
        sandbox={"solve": "fixed", "solve_s": 5.0},
        timings={"first_poll_s": 0.3, "poll_every_s": 0.1},
    )
    record = runner.run(case, tmp_path)
    summary = metrics.summarize(record, 0.3, 0.1)
    assert record["exit"] == 0, (tmp_path / "invariant" / "log.txt").read_text()[-3000:]
    assert summary["delivered"] == 8 and summary["submits"] == 8
    assert record["stats"]["threads"]["peak"] == 2  # the service's count: never above the cap, and reached
    assert summary["peak_held"] <= 2  # the client's: submit to token posted
    timeline_levels = [level for _, level in record["stats"]["threads"]["timeline"]]
    assert max(timeline_levels) == 2
    assert summary["over_age_limit"] == 0


@pytest.mark.long
@pytest.mark.unmeasured
def test_a_fleet_row_runs_hosts_that_share_one_backfill_and_measures_each(tmp_path, seaweedfs):
    """The fleet rows' code at its smallest: 2 hosts of 2 workers, 2 days at cap 2, under one luigid
    and one SeaweedFS bucket. Every figure comes from the run: the sandbox's submits and peak, the
    regions in each host's own log, each host's process tree as psutil sampled it."""
    case = Case(
        "fleet",
        "luigi",
        n_days=2,
        cap=2,
        workers=2,
        hosts=2,
        scheduler="central",
        store="s3",
        first_day=datetime.date(2026, 1, 1),
        sandbox={"solve": "fixed", "solve_s": 5.0},
        timings={"first_poll_s": 0.3, "poll_every_s": 0.1, "follow_plan": "false"},
    )
    record = runner.run(case, tmp_path, weed=seaweedfs)
    hosts = record["hosts"]
    logs = {h["name"]: (tmp_path / "fleet" / "hosts" / h["name"] / "log.txt").read_text() for h in hosts}
    assert [h["exit"] for h in hosts] == [0, 0] and record["exit"] == 0, {k: v[-2000:] for k, v in logs.items()}
    summary = metrics.summarize(record, 0.3, 0.1)
    assert summary["delivered"] == 8 and summary["submits"] == 8  # over both hosts, each region solved once
    assert sum(h["regions_run"] for h in hosts) == 8  # each run by one host, as its own log says
    assert record["stats"]["threads"]["peak"] <= 2  # luigid's cap over both hosts
    assert summary["makespan_s"] >= max(h["t_end"] for h in hosts) - record["t_start"] > 0
    for host in hosts:
        assert "backfill 2026-01-01..2026-01-02: all 2 days complete" in logs[host["name"]]
        # the tree's sums hold the CLI and at least one forked task process at their peak
        assert host["tree_processes"] >= 2 and host["task_processes"] >= 1
        assert host["tree_rss_mb"] > host["main_rss_mb"] > 0 and 0 < host["tree_uss_mb"] < host["tree_rss_mb"]
        if fleet.own_hostnames():  # luigid knows each host by its own name
            assert f"host={host['name']}," in logs[host["name"]]
    text = table.fleet_table([("2hosts", summary, record)], 1.03)
    assert "| 2 x 2 " in text and "8/8" in text and f"{summary['ratio']:.3f}" in text


@pytest.mark.parametrize(
    "s, expected",
    [
        (0.7, 1.5),  # ready before the first poll: seen at the first poll
        (1.5, 1.5),  # exactly on a tick: seen at that tick
        (1.51, 2.0),
        (3.0, 3.0),
        (3.2, 3.5),
        (8.1, 8.5),
    ],
)
def test_p_is_the_first_poll_tick_at_or_after_the_solve(s, expected):
    assert metrics.p(s, FP, EVERY) == pytest.approx(expected)


def test_min_polls_counts_the_ticks_up_to_p():
    assert metrics.min_polls(0.7, FP, EVERY) == 1
    assert metrics.min_polls(3.2, FP, EVERY) == 5  # 1.5, 2.0, 2.5, 3.0, 3.5


def test_lower_bound_is_the_larger_of_spread_work_and_the_longest_solve():
    solves = [1.0, 3.2, 2.2, 8.1]  # p = 1.5, 3.5, 2.5, 8.5: sum 16
    assert metrics.lower_bound(solves, 1, FP, EVERY) == pytest.approx(16.0)
    assert metrics.lower_bound(solves, 2, FP, EVERY) == pytest.approx(8.5)  # max p beats 16 / 2
    assert metrics.lower_bound([3.2] * 8, 4, FP, EVERY) == pytest.approx(7.0)  # 8 x 3.5 / 4
    assert metrics.lower_bound([], 4, FP, EVERY) == 0.0


def test_the_list_schedule_starts_each_solve_on_the_first_free_slot():
    solves = [1.0, 3.2, 2.2, 8.1]  # p = 1.5, 3.5, 2.5, 8.5
    assert metrics.list_schedule(solves, 1, FP, EVERY) == pytest.approx(16.0)
    # two slots: 1.5 | 3.5; 2.5 on the first (free at 1.5) -> 4.0; 8.5 on the second (3.5) -> 12.0
    assert metrics.list_schedule(solves, 2, FP, EVERY) == pytest.approx(12.0)
    assert metrics.list_schedule(solves, 2, FP, EVERY) >= metrics.lower_bound(solves, 2, FP, EVERY)
    assert metrics.list_schedule([3.2] * 8, 4, FP, EVERY) == pytest.approx(7.0)
    assert metrics.list_schedule([], 4, FP, EVERY) == 0.0


def test_peak_concurrency_does_not_count_a_handoff_as_overlap():
    assert metrics.peak_concurrency([(0, 1), (1, 2)]) == 1
    assert metrics.peak_concurrency([(0, 2), (1, 3), (1.5, 1.7)]) == 3


def test_slot_utilisation_and_handoff_gaps():
    held = [(0.5, 2.0), (0.6, 3.0), (2.1, 4.0), (3.3, 5.0)]
    assert metrics.slot_utilisation(held, 2, 5.0) == pytest.approx((1.5 + 2.4 + 1.9 + 1.7) / 10)
    gaps, slot_ends = metrics.handoff_gaps(held, 2, 0.0)
    assert gaps == pytest.approx([0.5, 0.6, 0.1, 0.3])  # each submit takes the slot freed earliest
    assert slot_ends == [4.0, 5.0]


def test_summarize_a_hand_made_run():
    def task(i, submit, solve, posted, polls):
        return {
            "id": str(i),
            "submit_t": submit,
            "ready_t": submit + solve,
            "solve_s": solve,
            "token_posted_t": posted,
            "polls": polls,
        }

    # Cap 2: two solves from t=1, then one in the slot freed at 4.6; one more task died (not delivered).
    tasks = [
        task(1, 1.0, 2.2, 3.55, 3),
        task(2, 1.1, 3.2, 4.6, 5),
        task(3, 3.6, 1.0, 5.12, 1),
        task(4, 4.7, 0.5, None, 1),
    ]
    run = {
        "cap": 2,
        "t_start": 0.0,
        "t_end": 8.0,
        "tasks": tasks,
        "expected": 3,
        "delivered": {"d/north": "1", "d/south": "2", "d/east": "3"},
        "stats": {"actions": {"get": 11}, "threads": {"peak": 2}},
    }
    s = metrics.summarize(run, FP, EVERY)
    # p = 2.5, 3.5, 1.5: sum 7.5 -> bound max(3.75, 3.5)
    assert s["lower_bound_s"] == pytest.approx(3.75)
    assert s["list_schedule_s"] == pytest.approx(4.0)  # in submit order: 2.5 | 3.5, then 1.5 after 2.5
    assert s["ratio"] == pytest.approx(8.0 / 3.75)
    assert s["utilisation"] == pytest.approx((2.55 + 3.5 + 1.52) / 16)
    assert s["solves_per_region"] == pytest.approx(4 / 3)
    assert s["polls_vs_min"] == pytest.approx(11 / 9)  # minimum 3 + 5 + 1
    assert s["token_age_max_s"] == pytest.approx(0.52)  # task 3: ready 4.6, posted 5.12
    assert s["over_age_limit"] == 0
    assert s["startup_s"] == pytest.approx(1.0)
    assert s["handoff_s"] == pytest.approx(3.6 - 3.55)  # task 3 took the slot task 1 freed
    assert s["tail_s"] == pytest.approx(8.0 - 5.12)
    assert s["added_per_region_s"] == pytest.approx((2 * 8.0 - 7.5) / 3)


def test_the_bound_with_slots_that_change_over_time():
    # 8 solves of p = 3 s: 24 slot-seconds; 4 slots for 2 s (8), then 2 slots: 8 s more (16).
    assert metrics.lower_bound_with_capacity([3.0] * 8, [(0.0, 4), (2.0, 2), (10.0, 4)], FP, EVERY) == 10.0
    assert metrics.lower_bound_with_capacity([3.0] * 8, [(0.0, 4)], FP, EVERY) == 6.0  # = lower_bound
    assert metrics.lower_bound_with_capacity([9.0], [(0.0, 4)], FP, EVERY) == 9.0  # max p


def test_threads_actually_free_while_another_consumer_holds_some():
    run = {"cap": 4, "t_start": 100.0, "other": {"until_s": 20.0}, "other_taken_at": [105.0, 106.0]}
    # plan of 5: one taken leaves 4 (the cap), two leave 3, until the consumer lets go
    assert metrics.free_capacity(run, 5) == [(0.0, 4), (5.0, 4), (6.0, 3), (20.0, 4)]
