"""The operator's commands behind `make export`, `make backfill`, `make plan` and friends.

Each checks its input and the configuration before any request leaves the machine, picks the
scheduler (SCHEDULER=auto|local|central), then hands the run to Luigi's own command line, whose
exit code comes from luigi.cfg's [retcode].
"""

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path

import luigi
import luigi.interface
import luigi.retcodes
import luigi.rpc
import requests

from portal_export.breaker import KeyBreaker
from portal_export.errors import ExportError
from portal_export.plan import plan_verdict

from . import config, scheduler, targets
from .day import DayExport
from .region import RegionExport, make_solver

DEFAULT_SCHEDULER_URL = "http://127.0.0.1:8082"
USAGE_ERROR = 2


class UsageError(ValueError):
    pass


def say(message):
    print(message, file=sys.stderr, flush=True)


def parse_day(name, value):
    if not value:
        raise UsageError(f"{name} is required, as YYYY-MM-DD")
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a date: give YYYY-MM-DD") from None
    if day > utc_today():
        raise UsageError(f"{name}={value} is in the future")
    return day


def utc_today():
    # RangeDaily clips to its own "now", which is UTC
    return datetime.datetime.now(datetime.timezone.utc).date()


def scheduler_url():
    return os.environ.get("LUIGI_SCHEDULER_URL") or DEFAULT_SCHEDULER_URL


def scheduler_answers(url):
    try:
        requests.get(url, timeout=2, allow_redirects=False)
    except requests.RequestException:
        return False
    return True


def choose_scheduler():
    """Luigi arguments for the scheduler SCHEDULER asks for, and the central URL if one is used."""
    mode = os.environ.get("SCHEDULER") or "auto"
    url = scheduler_url()
    if mode not in ("auto", "local", "central"):
        raise UsageError(f"SCHEDULER={mode!r}: use auto, local or central")
    if mode == "local":
        say("scheduler: local (SCHEDULER=local)")
        return ["--local-scheduler"], None
    if scheduler_answers(url):
        say(f"scheduler: central at {url} (visualiser: {url})")
        # keep-alive: a run that finds every captchaai slot taken waits its turn instead of exiting
        return ["--scheduler-url", url, "--worker-keep-alive"], url
    if mode == "central":
        raise UsageError(f"SCHEDULER=central, but no central scheduler answers at {url}: start it with `make scheduler`")
    say(f"scheduler: local (no central scheduler answers at {url})")
    return ["--local-scheduler"], None


def worker_count(args):
    return args.workers or luigi.interface.core().workers


def preflight(args):
    """Everything that can be refused without a request."""
    config.regions()
    config.api_key()
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"WORKERS={args.workers}: give at least 1")


def plan_check(args, strict=False):
    """Compare plan threads with the cap and workers; returns the problems (printed)."""
    cap = luigi.configuration.get_config().getint("resources", "captchaai", 1)
    workers = worker_count(args)
    try:
        threads, working = make_solver().threads()
    except ExportError as err:
        say(f"plan check: CaptchaAI answered {err}")
        if strict:
            raise
        return [str(err)]
    problems = plan_verdict(threads, cap, workers)
    say(f"plan: {threads} threads, {working} working now; cap {cap} solves, {workers} workers: "
        + ("ok" if not problems else "; ".join(problems)))
    if working >= threads:
        say("plan: every thread is busy now: another consumer is using this key")
    return problems


def reenable(url, days):
    """Let the operator's new run retry tasks luigid disabled after their one failure."""
    wanted = {DayExport(d).task_id for d in days}
    wanted |= {RegionExport(d, r).task_id for d in days for r in config.regions()}
    sched = luigi.rpc.RemoteScheduler(url)
    for task_id in sched.task_list("DISABLED", ""):
        if task_id in wanted:
            sched.re_enable_task(task_id)
            say(f"re-enabled {task_id}")


def run_luigi(args, task_argv, days):
    sched_argv, url = choose_scheduler()
    plan_check(args)
    if url:
        reenable(url, days)
    argv = ["--module", "tasks", *task_argv, *sched_argv]
    if args.workers:
        argv += ["--workers", str(args.workers)]
    try:
        luigi.retcodes.run_with_retcodes(argv)
    except SystemExit as done:
        return done.code or 0
    return 0


def cmd_export(args):
    day = parse_day("DAY", args.day)
    preflight(args)
    code = run_luigi(args, ["DayExport", "--date", day.isoformat()], [day])
    if code == 0:
        say(f"export: {targets.day_records_path(day)} and {targets.day_health_path(day)}")
    else:
        say(f"export: day {day} did not complete (exit {code}); see the log above")
    return code


def cmd_backfill(args):
    start, stop = parse_day("START", args.start), parse_day("STOP", args.stop)
    if start >= stop:
        raise UsageError(f"START={start} must be before STOP={stop} (STOP is exclusive)")
    preflight(args)
    today = utc_today()
    stop = min(stop, today + datetime.timedelta(days=1))  # never a day in the future
    days = [start + datetime.timedelta(days=i) for i in range((stop - start).days)]
    limit = args.task_limit or len(days)
    # RangeDaily clips its start to days_back before now and schedules task_limit days at most;
    # both are widened to the range so that it covers exactly [START, STOP).
    task_argv = ["RangeDaily", "--of", "DayExport", "--start", start.isoformat(), "--stop", stop.isoformat(),
                 "--days-back", str((today - start).days + 1), "--task-limit", str(limit)]
    if args.newest_first:
        task_argv.append("--reverse")
    code = run_luigi(args, task_argv, days)
    missing = [d for d in days if not DayExport(d).complete()]
    if missing:
        say(f"backfill: {len(missing)} of {len(days)} days missing: {', '.join(map(str, missing))}")
        return code or 1
    say(f"backfill: all {len(days)} days of [{start}, {stop}) complete in {config.data_dir()}")
    return code


def cmd_retry_unsolvable(args):
    day = parse_day("DAY", args.day)
    preflight(args)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    for region in config.regions():
        path = Path(targets.region_path(day, region))
        if path.exists() and json.loads(path.read_text()).get("status") == "unsolvable":
            path.replace(path.with_name(f"{path.name}.unsolvable-{stamp}"))  # kept for the record
            say(f"retry-unsolvable: {day} {region} will be solved again")
    return cmd_export(args)


def cmd_plan(args):
    config.api_key()
    problems = plan_check(args, strict=True)
    return 1 if problems else 0


def cmd_clear_breaker(args):
    codes = KeyBreaker.clear(config.state_dir())
    say(f"breaker cleared ({', '.join(codes)})" if codes else "breaker was not open")
    return 0


def cmd_scheduler(args):
    return scheduler.start(scheduler_url(), scheduler_answers, say)


def cmd_scheduler_stop(args):
    return scheduler.stop(say)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__)
    parser.add_argument("--workers", type=int, default=None, help="Luigi workers (default: [core] workers)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="materialize DayExport for one day")
    p.add_argument("day")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("backfill", help="every missing day in [START, STOP)")
    p.add_argument("start")
    p.add_argument("stop")
    p.add_argument("--newest-first", action="store_true")
    p.add_argument("--task-limit", type=int, default=None, help="at most this many days in this run")
    p.set_defaults(func=cmd_backfill)
    p = sub.add_parser("retry-unsolvable", help="re-attempt a day's unsolvable regions, keeping its solved ones")
    p.add_argument("day")
    p.set_defaults(func=cmd_retry_unsolvable)
    p = sub.add_parser("plan", help="compare the CaptchaAI plan with the cap and workers")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("clear-breaker", help="let requests with the key go out again")
    p.set_defaults(func=cmd_clear_breaker)
    p = sub.add_parser("scheduler", help="start luigid in the background, bound to loopback")
    p.set_defaults(func=cmd_scheduler)
    p = sub.add_parser("scheduler-stop", help="stop the luigid that `scheduler` started")
    p.set_defaults(func=cmd_scheduler_stop)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, config.ConfigError, ExportError) as err:
        say(f"error: {err}")
        return USAGE_ERROR
