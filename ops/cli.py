"""The operator's commands behind `make export`, `make backfill`, `make plan` and friends.

Each checks its input and the configuration before any request leaves the machine, picks the
scheduler (SCHEDULER=auto|local|central), then hands the run to Luigi (`luigi.build`), whose
result becomes an exit code through luigi.cfg's [retcode] (ops/luigi_run.py).
"""

import argparse
import datetime
import hashlib
import logging
import os
import re
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import luigi
import luigi.interface
import luigi.retcodes
import luigi.rpc
import requests
from luigi.tools.range import RangeDaily

from portal_export import redo
from portal_export.breaker import KeyBreaker
from portal_export.errors import ExportError
from portal_export.plan import plan_verdict
from portal_export.state import store_now
from tasks import config, targets
from tasks.base import PortalTask
from tasks.day import DayExport
from tasks.login import check_login
from tasks.region import RegionExport, make_solver
from tasks.secrets import say, scrub

from . import alert_channels, heal, luigi_run, luigid, probe, retention_run, run_alert, steward, stopping, takeover
from . import scheduler_url as central

DEFAULT_SCHEDULER_URL = "http://127.0.0.1:8082"
LUIGID_DONE_COOLDOWN_S = 10  # luigid's [scheduler] stable_done_cooldown_secs, left at its default
USAGE_ERROR = 2
INTERRUPTED = 130  # what a shell reports for a command that Ctrl-C ended (128 + SIGINT)
TERMINATED = 143  # and for one that SIGTERM ended (128 + SIGTERM)


class UsageError(ValueError):
    pass


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


def parse_ended_day(name: str, value: str | None) -> datetime.date:
    """A day to export: one that has ended in UTC. Today's records are not final until it ends,
    and a complete day is never exported again."""
    day = parse_day(name, value)
    today = utc_today()
    if day >= today:
        newest = today - datetime.timedelta(days=1)
        raise UsageError(
            f"{name}={value} has not ended yet in UTC (today is {today}): a day is exported once it has ended, "
            f"the newest is {newest}"
        )
    return day


def utc_today() -> datetime.date:
    # RangeDaily clips to its own "now", which is UTC
    return datetime.datetime.now(datetime.timezone.utc).date()


def scheduler_url() -> str:
    url = os.environ.get("LUIGI_SCHEDULER_URL") or DEFAULT_SCHEDULER_URL
    problem = central.problem(url)
    if problem:
        raise UsageError(f"LUIGI_SCHEDULER_URL={central.shown(url)}: {problem}")
    return url


def choose_scheduler() -> str | None:
    """The central scheduler's URL when SCHEDULER asks for it (and it answers); None: the local one.

    A proxy that refuses the URL's credentials (or their absence) is a configuration error, also
    with SCHEDULER=auto: falling back to a local scheduler would drop the cap shared across runs.
    """
    mode = os.environ.get("SCHEDULER") or "auto"
    if mode not in ("auto", "local", "central"):
        raise UsageError(f"SCHEDULER={mode!r}: use auto, local or central")
    if mode == "local":
        say("scheduler: local (SCHEDULER=local)")
        return None
    url = scheduler_url()
    shown = central.shown(url)
    try:
        status = central.status(url)
    except requests.exceptions.SSLError as err:
        raise UsageError(
            f"the central scheduler at {shown} failed TLS verification ({err.__class__.__name__}): "
            "REQUESTS_CA_BUNDLE=/path/to/ca.pem names a private CA"
        ) from None
    if status in central.REFUSED:
        given = (
            "the credentials in" if urlsplit(url).username else "a request without credentials: put USER:PASSWORD@ in"
        )
        raise UsageError(f"the central scheduler at {shown} refused {given} LUIGI_SCHEDULER_URL (HTTP {status})")
    if status is not None:
        say(f"scheduler: central at {shown} (visualiser: {central.bare(url)})")
        return url
    if mode == "central":
        raise UsageError(
            f"SCHEDULER=central, but no central scheduler answers at {shown}: start it with `make scheduler`"
        )
    say(f"scheduler: local (no central scheduler answers at {shown})")
    return None


def worker_count(args: argparse.Namespace) -> int:
    return args.workers or luigi.interface.core().workers


def check_args(args: argparse.Namespace) -> None:
    """What can be refused in one line without a request: the arguments and the configuration."""
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"WORKERS={args.workers}: give at least 1")
    config.regions()
    config.api_key()
    retention_run.keep_s()  # a keep_state_days that cannot work is said now, not at the run's end
    heal.after_s()
    targets.check_store()  # a missing bucket or refused credentials: one line, before any other request
    targets.check_tmpdir()


def preflight() -> None:
    """The portal login, before any request to CaptchaAI. Inside the run's alert: a night whose
    login is refused (a changed or expired password) is a night that failed."""
    check_login(config.captchaai().http_timeout_s, say)


def luigid_cap(url: str) -> int:
    """The captchaai cap in force on luigid: its own [resources], not this process's config."""
    for resource in luigid.remote(url).resource_list():
        if resource["name"] == config.RESOURCE:
            return int(resource["num_total"])
    return 1  # luigid's default for a resource its config does not declare


def plan_check(
    args: argparse.Namespace, strict: bool = False, url: str | None = None, run: run_alert.RunAlert | None = None
) -> tuple[list[str], steward.PlanSeen | None]:
    """Compare plan threads with the cap and workers; returns the problems (printed) and the reading
    (None when CaptchaAI did not answer), which `run`'s alert notes too.

    With a central scheduler at `url` the cap compared is luigid's, the one that holds.
    """
    if url:
        cap, where = luigid_cap(url), f"luigid's at {central.shown(url)}"
    else:
        cap, where = config.configured_cap(), f"[resources] {config.RESOURCE}"
    workers = worker_count(args)
    try:
        threads, working = make_solver().threads()
    except ExportError as err:
        say(f"{'' if strict else 'warning: '}plan check: CaptchaAI answered {err}")
        if strict:
            raise
        return [str(err)], None
    if run is not None:
        run.note_plan(threads, working)
    problems = plan_verdict(threads, cap, workers)
    prefix = "warning: " if problems and not strict else ""
    say(
        f"{prefix}plan: {threads} threads, {working} working now; cap {cap} solves ({where}), {workers} workers: "
        + ("ok" if not problems else "; ".join(problems))
    )
    say(steward.describe(url, threads, working))
    if working >= threads:
        say(
            f"warning: plan: all {threads} threads are busy now: another consumer is using this key; "
            "solves wait for threads to free up"
        )
    return problems, steward.PlanSeen(threads, working)


def portal_tasks(days: Sequence[datetime.date]) -> dict[str, PortalTask]:
    """These days' DayExport and RegionExport tasks, by Luigi task id."""
    found: list[PortalTask] = [DayExport(d) for d in days]
    found += [RegionExport(d, r) for d in days for r in config.regions()]
    return {task.task_id: task for task in found}


def task_ids(days: Sequence[datetime.date]) -> set[str]:
    """Luigi task ids of these days' DayExport and RegionExport tasks."""
    return set(portal_tasks(days))


def reenable(url: str, days: Sequence[datetime.date]) -> None:
    """Let the operator's new run retry tasks luigid disabled after their one failure."""
    wanted = task_ids(days)
    sched = luigid.remote(url)
    for task_id in sched.task_list("DISABLED", ""):
        if task_id in wanted:
            sched.re_enable_task(task_id)
            say(f"re-enabled {task_id}")


def wait_for_other_runs(url: str, days: Sequence[datetime.date], pending: bool = True) -> bool:
    """Wait while another run, sharing luigid, has work on these days that are not complete yet.

    A worker exits once none of its tasks is pending, also while some are still running in another
    run's worker: this run waits for that run's tasks (running, or pending with that run as a
    stakeholder) to end, so that its final check sees what the other run delivered. True when
    another run had such work. `pending=False`: running tasks only (they end soon, and write
    their failure records first), for a run that failed: a worker that exited stays a
    stakeholder of its pending tasks until luigid prunes it.
    """
    wanted = task_ids(days)
    # This process's Luigi workers, done by now, by their whole id: its salt tells them from another
    # host's with the same hostname and pid (containers, cloned machines).
    me = luigi_run.OWN_WORKERS
    sched = luigid.remote(url)
    statuses = ("RUNNING", "PENDING") if pending else ("RUNNING",)
    told = False
    while not all_complete(days):
        busy = [
            task_id
            for status in statuses
            for task_id, task in sched.task_list(status, "").items()
            if task_id in wanted and (status == "RUNNING" or any(w not in me for w in task["workers"]))
        ]
        if not busy:
            return told
        if not told:
            say(f"waiting for {len(busy)} task(s) of these days that another run has")
            told = True
        time.sleep(0.5)
    return told


def all_complete(days: Sequence[datetime.date]) -> bool:
    return set(days) <= run_alert.complete_days(days)


def log_to_stderr() -> None:
    """Luigi's default logging covers its own logger only: the project's lines (task ids, retries,
    busy plan threads) would be lost below WARNING and printed bare above. An operator's
    [core] logging_conf_file decides instead."""
    core = luigi.interface.core()
    if core.logging_conf_file:
        return
    for name in ("portal_export", "tasks", "ops"):
        logger = logging.getLogger(name)
        if not any(getattr(h, "portal_export_cli", False) for h in logger.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s: %(name)s: %(message)s"))
            setattr(handler, "portal_export_cli", True)  # noqa: B010 (ours, found again by getattr above)
            logger.addHandler(handler)
            logger.setLevel(getattr(logging, core.log_level, logging.INFO))


def settle_done_cooldown(done_at: float) -> None:
    """luigid keeps a task DONE for stable_done_cooldown_secs after it finished, whatever a worker
    says (so that two runs do not run a just-finished task twice): a task made incomplete on
    purpose within that time must wait it out to be run again. `done_at` is on the store's clock
    (when the task's output was written), compared with the store's now: the host that ran it may
    have a clock minutes off."""
    wait = done_at + LUIGID_DONE_COOLDOWN_S + 0.5 - store_now(targets.store())
    if wait > 0:
        say(f"waiting {wait:.0f} s for luigid to let regions it saw finish just now run again")
        time.sleep(wait)


def lock_dir() -> Path:
    """Where Luigi's same-command lock lives: one directory per data dir on this host, for this user.

    Luigi refuses a second process with the same command line while one runs (exit
    already_running). Its default, /tmp/luigi, is machine-wide, so runs into other data dirs
    (another account, another config, a parallel test) would block each other. The lock is a pid
    file, and pids mean something on one host only: in the shared data dir, a host would read
    another host's pid as one of its own processes (PID namespaces make that certain), so the
    directory is host-local, named for the data dir.
    """
    where = hashlib.sha256(targets.where().encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir()) / f"portal-export-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    if base.stat().st_uid != os.getuid():  # someone else's, in a shared /tmp: never trust its pid files
        raise UsageError(f"{base} belongs to another user: set TMPDIR to a directory of your own")
    path = base / "luigi-locks" / where
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_luigi(
    args: argparse.Namespace,
    tasks: Sequence[luigi.Task],
    days: Sequence[datetime.date],
    redone_at: float | None = None,
    run: run_alert.RunAlert | None = None,
) -> int:
    """Luigi's exit code for the run of `tasks` (which make `days`); 0 for tasks another run
    completed in the meantime.

    `redone_at`: when the newest task made incomplete on purpose (retry-unsolvable) had finished;
    `run`: the alert around the run, which notes a busy plan at its start.
    """
    log_to_stderr()
    url = choose_scheduler()
    _, seen = plan_check(args, url=url, run=run)
    if url:
        reenable(url, days)
        if redone_at:
            settle_done_cooldown(redone_at)
    locks = lock_dir()
    codes = luigi.retcodes.retcode()
    others = False

    def settle(failed: bool) -> None:
        nonlocal others
        others = wait_for_other_runs(str(url), days, pending=not failed) or others

    with steward.following_plan(url, seen) as factory:  # the cap follows the plan meanwhile
        code = luigi_run.run(tasks, factory, lock_dir=str(locks), scheduler_url=url, workers=args.workers)
        if url and code != codes.already_running:  # tasks whose host died run again here, in this command
            code = takeover.Takeover(url, portal_tasks(days), say).run(
                code,
                rerun=lambda: luigi_run.run(
                    tasks, factory, lock_dir=str(locks), scheduler_url=url, workers=args.workers, lock=False
                ),
                settle=settle,
                done=lambda: all_complete(days),
            )
    retention_run.nightly()  # the run's bounded share of removing old state
    # The worker ends early when tasks of these days run in another run's worker (on luigid): its
    # status then says nothing went wrong, or "not granted run permission" for tasks done by
    # then; either way the asked-for tasks are not complete (not_run). What this run was asked for
    # is the days: wait for the other run's tasks, then judge by the days' outputs.
    if code and code in (codes.already_running, codes.not_run):
        if url:
            settle(False)
        if all_complete(days):
            return 0  # done, by whichever run did it
        if url and (others or code == codes.already_running):
            # settled: no other run has tasks of these days any more, and they left days missing
            say("tasks of these days failed in another run on the central scheduler (its output says why)")
            return codes.task_failed
        if code == codes.already_running:
            say(f"another run is running this work: the same command on this data dir (Luigi's lock in {locks})")
    return code


def cmd_export(args: argparse.Namespace) -> int:
    day = parse_ended_day("DAY", args.day)
    check_args(args)
    return export_day(args, day, lambda: heal.heal([day], say))


def export_day(
    args: argparse.Namespace, day: datetime.date, set_aside: Callable[[], float | None] | None = None
) -> int:
    """DayExport for one day, in a run with its summary and alert; `set_aside()` first, after the
    preflight, returns when the newest task it made incomplete on purpose had finished."""
    with run_alert.RunAlert(args, [day]) as run:
        preflight()
        redone_at = set_aside() if set_aside else None
        code = run_luigi(args, [DayExport(day)], [day], redone_at, run)
        if DayExport(day).complete():
            store = targets.store()
            say(
                f"export: {store.location(targets.day_records_key(day))} and {store.location(targets.day_health_key(day))}"
            )
        return run.finish(code)  # non-zero when the day is missing


def cmd_backfill(args: argparse.Namespace) -> int:
    # STOP is exclusive: at most today, which the nightly `STOP=$(date -u +%F)` gives. A later one
    # is refused rather than clipped: it names days that have not ended, which no run exports.
    start = parse_day("START", args.start)
    stop = parse_day("STOP", args.stop, ": STOP is exclusive, so at most today")
    if start >= stop:
        raise UsageError(f"START={start} must be before STOP={stop} (STOP is exclusive)")
    if args.task_limit is not None and args.task_limit < 1:
        raise UsageError(f"TASK_LIMIT={args.task_limit}: give at least 1")
    check_args(args)
    today = utc_today()
    days = [start + datetime.timedelta(days=i) for i in range((stop - start).days)]
    limit = args.task_limit or len(days)
    # RangeDaily clips its start to days_back before its own now and schedules task_limit days at
    # most; both are widened to the range so that it covers exactly [START, STOP). One day more
    # than needed keeps START when the run crosses midnight UTC before RangeDaily reads the clock.
    range_task = RangeDaily(
        of=DayExport,
        start=start,
        stop=stop,
        days_back=(today - start).days + 2,
        task_limit=limit,
        reverse=args.newest_first,
    )
    with run_alert.RunAlert(args, days) as run:
        preflight()
        redone_at = heal.heal(days, say)
        return run.finish(
            run_luigi(args, [range_task], days, redone_at, run=run)
        )  # non-zero when a day of the range is missing


def cmd_retry_unsolvable(args: argparse.Namespace) -> int:
    day = parse_ended_day("DAY", args.day)
    check_args(args)

    def set_aside() -> float | None:
        done = redo.set_aside(targets.store(), day, config.regions(), complete_too=True)
        for region in done.regions:
            say(f"retry-unsolvable: {day} {region} will be solved again")
        if not done.regions:
            say(f"retry-unsolvable: day {day} has no region given up as unsolvable")
        return done.finished_at

    return export_day(args, day, set_aside)


def cmd_plan(args: argparse.Namespace) -> int:
    config.api_key()
    targets.check_store()  # the cap log is read there: a bad store is said before CaptchaAI is asked
    url = choose_scheduler()  # the cap that holds is luigid's when runs go through one
    problems, _ = plan_check(args, strict=True, url=url)
    return 1 if problems else 0


def cmd_alert_test(args: argparse.Namespace) -> int:
    return alert_channels.alert_test()


def cmd_clear_breaker(args: argparse.Namespace) -> int:
    targets.check_store()
    codes = KeyBreaker.clear(targets.store())
    say(f"breaker cleared ({', '.join(codes)})" if codes else "breaker was not open")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """The solve-health report of the configured data dir, with the configured validation threshold."""
    from portal_export import report  # pandas and matplotlib: only this command needs them

    targets.check_store()
    return report.run(targets.store(), targets.where(), config.portal().max_unsolvable_ratio)


def cmd_scheduler(args: argparse.Namespace) -> int:
    from . import history  # SQLAlchemy: a tenth of a second at every other command's start

    url = scheduler_url()
    keep = retention_run.keep_s()
    events, tasks = history.prune(history.db_path(), history.cutoff_of(keep, time.time()))
    if tasks or events:
        say(f"scheduler: removed {tasks} task runs ({events} events) older than keep_state_days from luigid's history")
    return (luigid.foreground if args.foreground else luigid.start)(url, say, args.bind)


def show(message: str) -> None:
    """A command's answer (make state, make prune), on stdout: errors and warnings stay on stderr."""
    print(scrub(message), flush=True)


def cmd_state(args: argparse.Namespace) -> int:
    return retention_run.cmd_state(show)


def cmd_prune(args: argparse.Namespace) -> int:
    return retention_run.cmd_prune(show, args.dry_run)


def cmd_scheduler_stop(args: argparse.Namespace) -> int:
    return luigid.stop(say)


def cmd_metrics_server(args: argparse.Namespace) -> int:
    from . import metrics_server  # prometheus_client: only this command needs it

    try:
        port = metrics_server.parse_port(args.port)
    except ValueError as err:
        raise UsageError(str(err)) from None
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
    p = sub.add_parser("plan", help="compare the CaptchaAI plan with the cap and workers")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("alert-test", help="send a test message through every configured alert channel")
    p.set_defaults(func=cmd_alert_test)
    p = sub.add_parser("clear-breaker", help="let requests with the key go out again")
    p.set_defaults(func=cmd_clear_breaker)
    p = sub.add_parser("report", help="solve-health table and plot from the data dir's health files")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("state", help="what the data dir keeps besides the outputs: count, oldest, bytes per kind")
    p.set_defaults(func=cmd_state)
    p = sub.add_parser("prune", help="remove now what [portal] keep_state_days lets go")
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.set_defaults(func=cmd_prune)
    probe.add_parser(sub, parse_day)
    p = sub.add_parser("scheduler", help="start luigid in the background, on loopback unless --bind names an address")
    p.add_argument(
        "--bind",
        default=luigid.LOOPBACK,
        help="the address luigid listens on (make scheduler SCHEDULER_BIND=...); beyond loopback it warns",
    )
    p.add_argument(
        "--foreground",
        action="store_true",
        help="run luigid in the foreground (for systemd: deploy/), with the state, history and log dir of the background one",
    )
    p.set_defaults(func=cmd_scheduler)
    p = sub.add_parser("scheduler-stop", help="stop the luigid that `scheduler` started")
    p.set_defaults(func=cmd_scheduler_stop)
    p = sub.add_parser("metrics-server", help="serve GET /metrics (Prometheus) from the data dir until stopped")
    p.add_argument("--port", default="9464", help="the port (make metrics-server METRICS_PORT=...); 0: any free one")
    p.add_argument("--bind", default=luigid.LOOPBACK, help="the address (METRICS_BIND=...); loopback by default")
    p.set_defaults(func=cmd_metrics_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs = args.func in (cmd_export, cmd_backfill, cmd_retry_unsolvable)
    try:
        with stopping.handled(runs):  # SIGTERM ends a run as Ctrl-C does, promptly (ops/stopping.py)
            code: int = args.func(args)
        return code
    except (UsageError, config.ConfigError, ExportError) as err:
        say(f"error: {err}")
        return USAGE_ERROR
    except luigi.rpc.RPCError as err:  # luigid (or its proxy) went away after the run chose it
        say(f"error: {err}: {err.sub_exception}")
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: someone stopped it on purpose, so no alert
        ctrl_c = stopping.seen(stop) == signal.SIGINT
        how = "interrupted" if ctrl_c else "stopped by SIGTERM"
        say(f"{args.command}: {how}; every day written is whole, the same command again finishes the rest")
        if ctrl_c:
            return INTERRUPTED
        return TERMINATED
