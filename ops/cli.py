"""The operator's commands behind `make export`, `make backfill`, `make plan` and friends.

Each checks its input and configuration before any request, picks the scheduler
(SCHEDULER=auto|local|central) and hands the run to `luigi.build`; [retcode] makes the exit code.
"""

import argparse
import datetime
import re
import signal
import time
from collections.abc import Callable, Sequence

import luigi.rpc
from luigi.tools.range import RangeDaily

from portal_export import redo, store_keys
from portal_export.breaker import KeyBreaker
from portal_export.errors import ExportError
from tasks import config, config_check, targets
from tasks.day import DayExport
from tasks.secrets import say, scrub

from . import UsageError, alert_channels, config_show, luigid, probe, retention_run, run_alert, stopping
from .run import check_args, choose_scheduler, heal, plan_check, run_luigi, scheduler_url

USAGE_ERROR = 2
# Commands that read no configuration of the project's: a mistake in it does not stop them
UNCHECKED = ("config", "scheduler-stop")
INTERRUPTED = 130  # what a shell reports for a command that Ctrl-C ended (128 + SIGINT)
TERMINATED = 143  # and for one that SIGTERM ended (128 + SIGTERM)


def parse_day(name: str, value: str | None, why: str = "") -> datetime.date:
    """A date of at most today (UTC); `why` ends the message that refuses a later one."""
    if not value:
        raise UsageError(f"{name} is required, as YYYY-MM-DD")
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a date: give YYYY-MM-DD") from None
    today = utc_today()
    if day > today:
        raise UsageError(f"{name}={value} is in the future (today is {today} in UTC){why}")
    return day


def utc_today() -> datetime.date:
    return datetime.datetime.now(datetime.timezone.utc).date()  # RangeDaily clips to its own "now", which is UTC


def export_day(args: argparse.Namespace, set_aside: Callable[[datetime.date], float | None]) -> int:
    """DayExport for DAY, with its summary and alert; `set_aside(day)` runs after the portal login."""
    day, today = parse_day("DAY", args.day), utc_today()
    if day >= today:  # a complete day is never exported again
        raise UsageError(
            f"DAY={args.day} has not ended yet in UTC (today is {today}): a day is exported once it has ended, "
            f"the newest is {today - datetime.timedelta(days=1)}"
        )
    check_args(args)
    with run_alert.RunAlert(args, [day]) as run:
        code = run_luigi(args, [DayExport(day)], [day], lambda: set_aside(day), run)
        if DayExport(day).complete():
            where = targets.store().location
            say(f"export: {where(store_keys.day_records(day))} and {where(store_keys.day_health(day))}")
        return run.finish(code)  # non-zero when the day is missing


def cmd_export(args: argparse.Namespace) -> int:
    return export_day(args, lambda day: heal([day]))


def cmd_backfill(args: argparse.Namespace) -> int:
    # STOP is exclusive: at most today (the nightly `STOP=$(date -u +%F)`); a later one is refused, not clipped
    start = parse_day("START", args.start)
    stop = parse_day("STOP", args.stop, ": STOP is exclusive, so at most today")
    if start >= stop:
        raise UsageError(f"START={start} must be before STOP={stop} (STOP is exclusive)")
    if args.task_limit is not None and args.task_limit < 1:
        raise UsageError(f"TASK_LIMIT={args.task_limit}: give at least 1")
    check_args(args)
    days = [start + datetime.timedelta(days=i) for i in range((stop - start).days)]
    # days_back and task_limit widened to cover exactly [START, STOP); a day more keeps START past midnight UTC
    back = (utc_today() - start).days + 2
    limit = args.task_limit or len(days)
    # param_name given: Luigi's default of None is no string, and every run would warn so (parameter.py)
    range_task = RangeDaily(
        of=DayExport,
        start=start,
        stop=stop,
        days_back=back,
        task_limit=limit,
        reverse=args.newest_first,
        param_name="date",
    )
    with run_alert.RunAlert(args, days) as run:  # its exit code is non-zero when a day is missing
        return run.finish(run_luigi(args, [range_task], days, lambda: heal(days), run))


def cmd_retry_unsolvable(args: argparse.Namespace) -> int:
    def set_aside(day: datetime.date) -> float | None:
        done = redo.set_aside(targets.store(), day, config.regions(), complete_too=True)
        for region in done.regions:
            say(f"retry-unsolvable: {day} {region} will be solved again")
        if not done.regions:
            say(f"retry-unsolvable: day {day} has no region given up as unsolvable")
        return done.finished_at

    return export_day(args, set_aside)


def cmd_plan(args: argparse.Namespace) -> int:
    config.api_key()
    targets.check_store()  # the cap log is read there: a bad store is said before CaptchaAI is asked
    url = choose_scheduler()  # the cap that holds is luigid's when runs go through one
    problems, _ = plan_check(args, strict=True, url=url)
    return 1 if problems else 0


def cmd_clear_breaker(args: argparse.Namespace) -> int:
    targets.check_store()
    codes = KeyBreaker.clear(targets.store())
    say(f"breaker cleared ({', '.join(codes)})" if codes else "breaker was not open")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from portal_export import report  # pandas and matplotlib: only this command needs them

    targets.check_store()
    return report.run(targets.store(), targets.where(), config.portal().max_unsolvable_ratio)


def cmd_scheduler(args: argparse.Namespace) -> int:
    from . import history  # SQLAlchemy: a tenth of a second at every other command's start

    url = scheduler_url()
    events, tasks = history.prune(history.DB, history.cutoff_of(retention_run.keep_s(), time.time()))
    if tasks or events:
        say(f"scheduler: removed {tasks} task runs ({events} events) older than keep_state_days from luigid's history")
    return (luigid.foreground if args.foreground else luigid.start)(url, say, args.bind)


def show(message: str) -> None:
    """A command's answer on stdout: errors and warnings stay on stderr."""
    print(scrub(message), flush=True)


def cmd_metrics_server(args: argparse.Namespace) -> int:
    from . import metrics_server  # prometheus_client: only this command needs it

    port = metrics_server.parse_port(args.port)
    if not args.bind.strip():
        raise UsageError("METRICS_BIND is empty: give an address (127.0.0.1 by default)")
    return metrics_server.serve(port, args.bind.strip(), say)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ops", description=__doc__)
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
    sub.add_parser("plan", help="compare the CaptchaAI plan with the cap and workers").set_defaults(func=cmd_plan)
    p = sub.add_parser("alert-test", help="send a test message through every configured alert channel")
    p.set_defaults(func=lambda args: alert_channels.alert_test())
    sub.add_parser("clear-breaker", help="let requests with the key go out again").set_defaults(func=cmd_clear_breaker)
    p = sub.add_parser("report", help="solve-health table and plot from the data dir's health files")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("state", help="what the data dir keeps besides the outputs: count, oldest, bytes per kind")
    p.set_defaults(func=lambda args: retention_run.cmd_state(show))
    p = sub.add_parser("prune", help="remove now what [portal] keep_state_days lets go")
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.set_defaults(func=lambda args: retention_run.cmd_prune(show, args.dry_run))
    probe.add_parser(sub, parse_day)
    p = sub.add_parser("scheduler", help="start luigid in the background, on loopback unless --bind names an address")
    text = "the address luigid listens on (make scheduler SCHEDULER_BIND=...); beyond loopback it warns"
    p.add_argument("--bind", default=luigid.LOOPBACK, help=text)
    text = (
        "run luigid in the foreground (for systemd: deploy/), with the state, history and log dir of the background one"
    )
    p.add_argument("--foreground", action="store_true", help=text)
    p.set_defaults(func=cmd_scheduler)
    p = sub.add_parser("scheduler-stop", help="stop the luigid that `scheduler` started")
    p.set_defaults(func=lambda args: luigid.stop(say))
    p = sub.add_parser("metrics-server", help="serve GET /metrics (Prometheus) from the data dir until stopped")
    p.add_argument("--port", default="9464", help="the port (make metrics-server METRICS_PORT=...); 0: any free one")
    p.add_argument("--bind", default=luigid.LOOPBACK, help="the address (METRICS_BIND=...); loopback by default")
    p.set_defaults(func=cmd_metrics_server)
    p = sub.add_parser("config", help="the effective configuration, each value with where it came from; secrets masked")
    p.set_defaults(func=lambda args: config_show.cmd_config(show))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs = args.func in (cmd_export, cmd_backfill, cmd_retry_unsolvable)
    try:
        if args.command not in UNCHECKED:
            config_check.check()  # before anything reads a key: a typo is refused, not run as if absent
        with stopping.handled(runs):  # SIGTERM ends a run as Ctrl-C does, promptly (ops/stopping.py)
            return int(args.func(args))
    except (UsageError, config.ConfigError, ExportError) as err:
        say(f"error: {err}")
        return USAGE_ERROR
    except ValueError as err:  # a section's parameters that its config file's interpolation refuses
        if (problem := config.unreadable(err)) is None:
            raise
        say(f"error: {problem}")
        return USAGE_ERROR
    except luigi.rpc.RPCError as err:  # luigid (or its proxy) went away after the run chose it
        say(f"error: {err}: {err.sub_exception}")
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: someone stopped it on purpose, so no alert
        ctrl_c = stopping.seen(stop) == signal.SIGINT
        how = "interrupted" if ctrl_c else "stopped by SIGTERM"
        say(f"{args.command}: {how}; every day written is whole, the same command again finishes the rest")
        return INTERRUPTED if ctrl_c else TERMINATED
