"""RegionExport: one region of one day, in one HTTP session, holding one captchaai slot, against the portal
that `[portal]` describes (tasks/portal_shape.py: its page, form fields, region values, record checks, login)."""

import logging
import os
import time
from collections.abc import Callable

import luigi
import requests

from portal_export import store_keys
from portal_export.breaker import KeyBreaker
from portal_export.captchaai import CaptchaAI
from portal_export.errors import TransientError
from portal_export.gate import Gate, Waiting
from portal_export.inflight import Settle
from portal_export.portal.session import log_in
from portal_export.region_file import Spool
from portal_export.retry_policy import export_region

from . import config, targets
from .base import PortalTask
from .portal_shape import portal_login, portal_shape

log = logging.getLogger(__name__)


def check_login(timeout_s: float, say: Callable[[str], None]) -> None:
    """A login before a run: a wrong password fails it before any captcha request; a portal down now does not."""
    if (login := portal_login()) is None:
        return
    try:
        with requests.Session() as session:
            log_in(session, config.portal_base_url().rstrip("/"), login, timeout_s)
    except TransientError as err:
        say(f"warning: login check: {err}; the regions will try again")


def settle(cfg: config.captchaai) -> Settle:
    """How a solve a process left is judged where nobody polls it: by its deadline."""
    return Settle(cfg.timeout_s, cfg.http_timeout_s)


def make_solver() -> CaptchaAI:
    cfg, key, store = config.captchaai(), config.api_key(), targets.store()
    # Solves are admitted under the cap in force and counted for the governor; a busy plan is waited out.
    gate = Gate(store, configured=config.configured_cap(), plan_every_s=cfg.plan_every_s, follows_plan=cfg.follow_plan)
    timing = {name: getattr(cfg, name) for name in ("timeout_s", "first_poll_s", "poll_every_s", "http_timeout_s")}
    api_base = os.environ.get("CAPTCHAAI_API_BASE") or cfg.api_base
    return CaptchaAI(key, api_base, **timing, breaker=KeyBreaker(store, key), gate=gate)


class RegionParameter(luigi.Parameter):
    """Any name [portal] regions accepts (letters, digits, - and _): it names a file and a URL parameter."""

    def normalize(self, x: object) -> str:
        return config.check_region(x)  # its ConfigError is a ValueError, as Luigi expects


class RegionExport(PortalTask):
    """Exports one region; its target holds the records and the solve facts, also when unsolvable."""

    date = luigi.DateParameter()
    region = RegionParameter()
    resources = {config.RESOURCE: 1}

    def output(self) -> luigi.target.FileSystemTarget:
        return targets.target(store_keys.region(self.date, self.region))

    def failure_key(self) -> str:
        return store_keys.region_failure(self.date, self.region)

    def make_solver(self) -> CaptchaAI:
        """A test seam. An open breaker, or no plan thread freeing up, fails the region before it loads a page."""
        solver = make_solver()
        solver.ready()
        return solver

    def work(self) -> None:
        started, attempt, cfg = time.time(), 1, config.captchaai()

        def on_attempt(n: int) -> None:
            nonlocal attempt
            attempt = n
            self.status(f"attempt {n}: loading the export page")

        def on_poll(task_id: str, polls: int, elapsed: float) -> None:
            percent = min(95, int(100 * elapsed / cfg.timeout_s))
            self.status(f"attempt {attempt}: CaptchaAI task {task_id}, {polls} polls, {elapsed:.0f} s", percent)

        portal = portal_shape()  # a [portal] key that cannot work fails the region before any request
        solver = self.make_solver()
        with Spool() as spool:  # the answer's records, until the facts that go before them are known
            outcome = export_region(
                self.date,
                self.region,
                portal,
                solver,
                sink=spool.fill,
                **{name: getattr(config.portal(), name) for name in ("attempts", "retry_base_s", "retry_jitter_s")},
                http_timeout_s=cfg.http_timeout_s,
                sleep=Waiting(targets.store()).sleep,  # a backoff lends this task's slot to another region
                on_attempt=on_attempt,
                on_poll=on_poll,
            )
            facts = outcome.to_dict()
            facts["resent_submits"] = list(getattr(solver, "resent", []))  # sent again at once, no attempt lost
            facts["busy_waits"] = getattr(solver, "busy_waits", 0)  # refused for busy threads, waited out
            facts["started_at"], facts["ended_at"] = started, time.time()
            # retried through a store outage: an accepted token's records outlive a store that blinked
            with self.output().open("w") as out:
                spool.write_to(out, facts)
        where, task_ids = f"day {self.date} region {self.region}", ",".join(outcome.task_ids)
        solve = "-" if outcome.solve_seconds is None else f"{outcome.solve_seconds:.1f} s"
        log.info("%s: %s, %d rows, CaptchaAI tasks %s, solve %s", where, outcome.status, facts["rows"], task_ids, solve)
        self.status(f"{outcome.status}: {facts['rows']} rows after {outcome.attempts} attempts", 100)
