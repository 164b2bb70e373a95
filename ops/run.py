"""A run around `luigi.build`: its checks, the scheduler it goes through, the plan it follows,
Luigi's lock, and the exit code its days make (luigi.cfg's [retcode], ops/luigi_run.py)."""

import argparse
import datetime
import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import luigi.interface
import luigi.retcodes
import requests

from portal_export import redo
from portal_export.errors import ExportError
from portal_export.governor import plan_verdict
from tasks import config, targets
from tasks.region import check_login, make_solver
from tasks.secrets import say

from . import UsageError, luigi_run, luigid, retention_run, run_alert, steward, takeover
from .takeover import all_complete, portal_tasks, reenable, settle_done_cooldown, wait_for_other_runs


def scheduler_url() -> str:
    url = os.environ.get("LUIGI_SCHEDULER_URL") or "http://127.0.0.1:8082"
    if problem := luigid.problem(url):
        raise UsageError(f"LUIGI_SCHEDULER_URL={luigid.shown(url)}: {problem}")
    return url


def choose_scheduler() -> str | None:
    """The central scheduler's URL when SCHEDULER asks for it and it answers; None: the local one. A
    proxy refusing the credentials is an error, also when auto: a local one would drop the shared cap."""
    mode = os.environ.get("SCHEDULER") or "auto"
    if mode not in ("auto", "local", "central"):
        raise UsageError(f"SCHEDULER={mode!r}: use auto, local or central")
    if mode == "local":
        say("scheduler: local (SCHEDULER=local)")
        return None
    url = scheduler_url()
    shown = luigid.shown(url)
    try:
        status = luigid.status(url)
    except requests.exceptions.SSLError as err:
        raise UsageError(
            f"the central scheduler at {shown} failed TLS verification ({err.__class__.__name__}): "
            "REQUESTS_CA_BUNDLE=/path/to/ca.pem names a private CA"
        ) from None
    if status in luigid.REFUSED:
        given = (
            "the credentials in" if urlsplit(url).username else "a request without credentials: put USER:PASSWORD@ in"
        )
        raise UsageError(f"the central scheduler at {shown} refused {given} LUIGI_SCHEDULER_URL (HTTP {status})")
    if status is not None:
        say(f"scheduler: central at {shown} (visualiser: {luigid.bare(url)})")
        return url
    if mode == "central":
        raise UsageError(
            f"SCHEDULER=central, but no central scheduler answers at {shown}: start it with `make scheduler`"
        )
    say(f"scheduler: local (no central scheduler answers at {shown})")
    return None


def check_args(args: argparse.Namespace) -> None:
    """The arguments and configuration, refused in one line before any request."""
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"WORKERS={args.workers}: give at least 1")
    config.api_key()
    retention_run.keep_s()  # said now, not at the run's end
    heal_after_s()
    targets.check_store()  # a missing bucket or refused credentials: one line, before any other request
    targets.check_tmpdir()


def heal_after_s() -> float:
    """`[portal] heal_after_hours` in seconds; ConfigError for one that cannot work."""
    hours = config.portal().heal_after_hours
    if not hours >= 0:  # negative, or nan
        raise config.ConfigError(f"[portal] heal_after_hours = {hours}: give 0 or more hours")
    return hours * 3600.0


def heal(days: Sequence[datetime.date]) -> float | None:
    """Days that heal: the unsolvable regions of `days` that failed validation `heal_after_hours` ago or more set
    aside (`portal_export.redo`), once over hosts; when the newest was written, or None. Here, not in `complete()`:
    completeness stays "the output exists", as every host and luigid agree."""
    wait, store = heal_after_s(), targets.store()
    newest = None
    for day in sorted(set(days) - set(targets.complete_days(list(days)))):
        done = redo.set_aside(store, day, config.regions(), older_than_s=wait)
        if done.regions:
            say(f"heal: {day} failed validation; solving {', '.join(done.regions)} again")
            newest = max(newest or 0.0, done.finished_at or 0.0)
    return newest


def plan_check(
    args: argparse.Namespace, strict: bool = False, url: str | None = None, run: run_alert.RunAlert | None = None
) -> tuple[list[str], steward.PlanSeen | None]:
    """Plan threads against the cap in force and workers: the problems, and the reading (None: no answer)."""
    if url:  # the cap in force on luigid is its own [resources], not this process's config
        caps = {resource["name"]: int(resource["num_total"]) for resource in luigid.remote(url).resource_list()}
        # 1: luigid's default for a resource its config does not declare
        cap, where = caps.get(config.RESOURCE, 1), f"luigid's at {luigid.shown(url)}"
    else:
        cap, where = config.configured_cap(), f"[resources] {config.RESOURCE}"
    workers = args.workers or luigi.interface.core().workers
    try:
        threads, working = make_solver().threads()
    except ExportError as err:
        say(f"{'' if strict else 'warning: '}plan check: CaptchaAI answered {err}")
        if strict:
            raise
        return [str(err)], None
    problems = plan_verdict(threads, cap, workers)
    prefix = "warning: " if problems and not strict else ""
    say(
        f"{prefix}plan: {threads} threads, {working} working now; cap {cap} solves ({where}), {workers} workers: "
        + ("ok" if not problems else "; ".join(problems))
    )
    say(steward.describe(threads, working))
    if working >= threads:
        say(
            f"warning: plan: all {threads} threads are busy now: another consumer is using this key; "
            "solves wait for threads to free up"
        )
        if run is not None:
            run.busy_plan = (threads, working)
    return problems, steward.PlanSeen(threads, working)


def log_to_stderr() -> None:
    """The project's log lines on stderr, unless [core] logging_conf_file decides (Luigi's covers its own)."""
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


def lock_dir() -> Path:
    """Luigi's same-command lock directory: per data dir, user and host. Luigi's /tmp/luigi would make
    runs into other data dirs block each other, and its pid files mean something on one host only."""
    base = Path(tempfile.gettempdir()) / f"portal-export-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    if base.stat().st_uid != os.getuid():  # someone else's, in a shared /tmp: never trust its pid files
        raise UsageError(f"{base} belongs to another user: set TMPDIR to a directory of your own")
    path = base / "luigi-locks" / hashlib.sha256(targets.where().encode()).hexdigest()[:16]
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_luigi(
    args: argparse.Namespace,
    tasks: Sequence[luigi.Task],
    days: Sequence[datetime.date],
    set_aside: Callable[[], float | None],
    run: run_alert.RunAlert,
) -> int:
    """Luigi's exit code for `tasks` (which make `days`), 0 when another run completed them."""
    check_login(config.captchaai().http_timeout_s, say)  # inside the run's alert, so a refused login fails the night
    redone_at = set_aside()
    log_to_stderr()
    url = choose_scheduler()
    _, seen = plan_check(args, url=url, run=run)
    if url:
        reenable(url, days)
        if redone_at:
            settle_done_cooldown(url, days)
    locks = lock_dir()
    codes = luigi.retcodes.retcode()
    others = False

    def settle(failed: bool) -> None:
        nonlocal others
        others = wait_for_other_runs(str(url), days, factory.own_workers, pending=not failed) or others

    with steward.following_plan(url, seen) as factory:  # the cap follows the plan meanwhile
        build = functools.partial(
            luigi_run.run, tasks, factory, lock_dir=str(locks), scheduler_url=url, workers=args.workers
        )
        code = build()
        if url and code != codes.already_running:  # tasks whose host died run again here, in this command
            code = takeover.Takeover(url, portal_tasks(days), say, own=factory.own_workers).run(
                code, rerun=lambda: build(lock=False), settle=settle, done=lambda: all_complete(days)
            )
    retention_run.nightly()  # the run's bounded share of removing old state
    # not_run: another run's worker had these days' tasks on luigid; wait for it, judge by the outputs
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
