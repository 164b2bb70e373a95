"""The bench's measures, from what the sandbox recorded (times in seconds on the sandbox's clock).

A run's record (see runner.py) is a dict with `cap`, `concurrency` (solves the design runs at
once, if fewer than the cap), `t_start`, `t_end` (the command's start and exit), `tasks`
(Sandbox.tasks()), `stats` (Sandbox.stats()), `delivered` ({"day/region": delivering task id})
and `expected` (regions asked for).

The lower bound counts the delivering solves only: the work that had to be done. Solves wasted on
faults then show up in makespan / lower bound as well as in solves per delivered region.
"""

import heapq
import math
import statistics

_EPS = 1e-9  # a solve landing exactly on a poll tick is seen at that tick


def ticks_after_first(s, first_poll, poll_every):
    """Polls after the first one before a client on the schedule sees a solve of `s` seconds."""
    return max(0, math.ceil((s - first_poll) / poll_every - _EPS))


def p(s, first_poll, poll_every):
    """The earliest a client keeping the poll schedule sees a token solved after `s` seconds."""
    return first_poll + ticks_after_first(s, first_poll, poll_every) * poll_every


def min_polls(s, first_poll, poll_every):
    """res.php calls the poll schedule needs to see a solve of `s` seconds."""
    return 1 + ticks_after_first(s, first_poll, poll_every)


def lower_bound(solve_seconds, cap, first_poll, poll_every):
    """No schedule of these solves on `cap` slots ends sooner: max(sum p / cap, max p)."""
    ps = [p(s, first_poll, poll_every) for s in solve_seconds]
    return max(sum(ps) / cap, max(ps)) if ps else 0.0


def list_schedule(solve_seconds, cap, first_poll, poll_every):
    """The makespan of these solves, in this order, each started on the first of `cap` slots to be
    free, with no time lost between them: what a scheduler with no overhead achieves."""
    slots = [0.0] * min(cap, len(solve_seconds))
    heapq.heapify(slots)
    for s in solve_seconds:
        heapq.heapreplace(slots, slots[0] + p(s, first_poll, poll_every))
    return max(slots, default=0.0)


def lower_bound_with_capacity(solve_seconds, capacity, first_poll, poll_every):
    """As lower_bound, with slots that change over time: `capacity` is [(from s after the start,
    slots)], sorted, the first from 0. The work sum p fits in no less time than that."""
    ps = [p(s, first_poll, poll_every) for s in solve_seconds]
    if not ps:
        return 0.0
    work = sum(ps)
    for i, (start, slots) in enumerate(capacity):
        end = capacity[i + 1][0] if i + 1 < len(capacity) else math.inf
        if slots > 0 and work <= slots * (end - start):
            return max(start + work / slots, max(ps))
        work -= slots * (end - start)
    return math.inf


def peak_concurrency(intervals):
    """Most [start, end) intervals open at once (one ending as another starts is no overlap)."""
    events = sorted([(e, -1) for _, e in intervals] + [(s, 1) for s, _ in intervals])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def slot_utilisation(held, cap, makespan):
    """Slot time held by delivering solves (submit to token posted) over cap x makespan."""
    return sum(end - start for start, end in held) / (cap * makespan) if makespan > 0 else 0.0


def handoff_gaps(held, cap, t_start):
    """Per solve, the idle time of its slot before it: from the previous post in that slot (or the
    command's start) to its submit. Slots are reconstructed greedily: a submit takes the slot that
    freed earliest. Returns (gaps in submit order, each slot's last post)."""
    free = [t_start] * cap
    gaps = []
    for start, end in sorted(held):
        freed = heapq.heappop(free)
        gaps.append(max(0.0, start - freed))
        heapq.heappush(free, end)
    return gaps, sorted(free)


def _pct(values, q):
    """Nearest-rank percentile; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def summarize(run, first_poll, poll_every):
    """Every number of the table for one run."""
    cap, t0, t1 = run["cap"], run["t_start"], run["t_end"]
    by_id = {t["id"]: t for t in run["tasks"]}
    delivering = [by_id[i] for i in run["delivered"].values()]
    solves = [t["solve_s"] for t in delivering]
    makespan = t1 - t0
    lb = lower_bound(solves, cap, first_poll, poll_every)
    in_order = [t["solve_s"] for t in sorted(delivering, key=lambda t: t["submit_t"])]
    listed = list_schedule(in_order, cap, first_poll, poll_every)
    own_lb = lower_bound(solves, run.get("concurrency", cap), first_poll, poll_every)
    held = [(t["submit_t"], t["token_posted_t"]) for t in delivering]
    ages = [t["token_posted_t"] - t["ready_t"] for t in delivering]
    polls_min = sum(min_polls(s, first_poll, poll_every) for s in solves)
    res_get = run["stats"]["actions"].get("get", 0)  # every poll, faulted ones included
    lags = [
        (post - sub) - p(t["solve_s"], first_poll, poll_every) for t, (sub, post) in zip(delivering, held, strict=True)
    ]
    slots = run.get("concurrency", cap)  # where the time goes: per slot the design actually uses
    gaps, slot_ends = handoff_gaps(held, slots, t0)
    first_submit = min((t["submit_t"] for t in run["tasks"]), default=t0)
    last_post = max((end for _, end in held), default=t1)
    n = len(delivering)
    return {
        "regions": f"{n}/{run['expected']}",
        "delivered": n,
        "expected": run["expected"],
        "cap": cap,
        "makespan_s": makespan,
        "lower_bound_s": lb,
        "ratio": makespan / lb if lb else None,
        "list_schedule_s": listed,
        "list_ratio": makespan / listed if listed else None,
        "own_ratio": makespan / own_lb if own_lb else None,
        "utilisation": slot_utilisation(held, cap, makespan),
        "peak_threads": run["stats"]["threads"]["peak"],
        "peak_held": peak_concurrency(held),
        "submits": len(run["tasks"]),
        "solves_per_region": len(run["tasks"]) / n if n else None,
        "polls_per_solve": res_get / len(run["tasks"]) if run["tasks"] else None,
        "polls_vs_min": res_get / polls_min if polls_min else None,
        "token_age_max_s": max(ages, default=None),
        "token_age_p50_s": _pct(ages, 0.5),
        "over_age_limit": sum(a > poll_every + 1.0 for a in ages),
        # Where the slot time beyond sum p(s) goes (seconds):
        "startup_s": first_submit - t0,  # process start, imports, plan check, scheduling
        "handoff_s": statistics.fmean(gaps[slots:]) if len(gaps) > slots else None,  # post -> next submit
        "lag_s": statistics.fmean(lags) if lags else None,  # submit -> post beyond p(s)
        "tail_s": t1 - last_post,  # last post -> exit
        "end_idle_s": sum(last_post - e for e in slot_ends),  # slots out of work before the last post
        "added_per_region_s": (slots * makespan - sum(p(s, first_poll, poll_every) for s in solves)) / n if n else None,
    }


def free_capacity(run, threads):
    """[(from s, slots)] of the threads actually free to the run: min(cap, plan threads - those the
    other consumer held), from when it took each to when it let them go."""
    other = run.get("other")
    if not other:
        return [(0.0, run["cap"])]
    t0 = run["t_start"]
    steps = [(0.0, run["cap"])]
    for held, taken in enumerate(sorted(run["other_taken_at"]), 1):
        steps.append((taken - t0, min(run["cap"], max(0, threads - held))))
    steps.append((other["until_s"], run["cap"]))
    return steps


def plan_summary(run, threads, first_poll, poll_every, regions):
    """The another-consumer measures of one run (see bench/__main__.py's plan table)."""
    from portal_export.caplog import seconds_below  # the same count the health files make

    base = summarize(run, first_poll, poll_every)
    by_id = {t["id"]: t for t in run["tasks"]}
    solves = [by_id[i]["solve_s"] for i in run["delivered"].values()]
    bound = lower_bound_with_capacity(solves, free_capacity(run, threads), first_poll, poll_every)
    delivered_days = {key.split("/")[0] for key in run["delivered"]}
    days_ok = sum(all(f"{d}/{r}" in run["delivered"] for r in regions) for d in delivered_days)
    changes = run.get("cap_changes", [])
    return {
        **base,
        "days_ok": days_ok,
        "refused": run["stats"]["codes"].get("in.php", {}).get("ERROR_ZERO_BALANCE", 0),
        "free_bound_s": bound,
        "free_ratio": base["makespan_s"] / bound if bound else None,
        "cap_changes": max(0, len(changes) - 1),  # the first line is the cap it started with
        "seconds_below_cap": seconds_below(changes, *run["wall"]) if changes else 0.0,
    }
