"""One region of one day, with the policy for each error class.

Permanent errors propagate at once. Transient ones (a refused token among them) are retried from a
fresh page and a fresh CaptchaAI task, `attempts` in all, after waits of base x (2^n - 1) +- jitter,
so regions that failed together do not come back together. An unsolvable task gets one fresh
resubmission; a second one gives the region up as unsolvable, for the day's validation to judge.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import tenacity

from .captchaai import OnPoll
from .errors import TokenRefused, TransientError, UnsolvableError
from .portal import export_once
from .portal.session import Delivery, Sink, Solver
from .portal.shape import PortalShape

log = logging.getLogger(__name__)


@dataclass
class RegionOutcome:
    day: str
    region: str
    status: str = "ok"  # or "unsolvable"
    rows: int = 0  # records delivered (to the sink)
    task_ids: list[str] = field(default_factory=list)  # every CaptchaAI task submitted, in order
    solve_seconds: float | None = None  # of the delivering solve
    attempts: int = 0  # fresh pages loaded
    refused_tokens: int = 0
    transient_errors: list[str] = field(default_factory=list)  # codes, in order
    idle_slot_seconds: float = 0.0  # backoff waits, during which the task lends its captchaai slot
    reposted_posts: list[str] = field(default_factory=list)  # gateway errors on the form post, token posted again

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def backoff(base_s: float, jitter_s: float, rng: Any = random) -> Callable[[tenacity.RetryCallState], float]:
    """tenacity's wait before attempt n + 1."""

    def wait(retry_state: tenacity.RetryCallState) -> float:
        jitter: float = rng.uniform(-jitter_s, jitter_s)
        return max(0.0, base_s * float(2**retry_state.attempt_number - 1) + jitter)

    return wait


@dataclass
class Attempt:
    """One attempt from a fresh page; its unsolvable count is the region's, not the attempt's."""

    out: RegionOutcome
    fetch: Callable[[], Delivery]
    unsolvable: int = 0

    def __call__(self) -> RegionOutcome:
        out = self.out
        while True:
            try:
                delivery = self.fetch()
            except UnsolvableError as err:
                self.unsolvable += 1
                if self.unsolvable >= 2:
                    tasks = ", ".join(out.task_ids)
                    log.warning(
                        "day %s region %s: unsolvable twice (tasks %s); giving it up", out.day, out.region, tasks
                    )
                    out.status = "unsolvable"
                    return out
                log.info("day %s region %s: %s; resubmitting once from a fresh page", out.day, out.region, err.code)
                continue
            except TransientError as err:
                out.transient_errors.append(err.code)
                out.refused_tokens += isinstance(err, TokenRefused)
                raise
            out.rows, out.solve_seconds = delivery.rows, delivery.solve_seconds
            return out


def export_region(
    day: object,
    region: str,
    portal: PortalShape | str,
    solver: Solver,
    *,
    sink: Sink,
    attempts: int = 4,
    retry_base_s: float = 10.0,
    retry_jitter_s: float = 10.0,
    http_timeout_s: float = 30.0,
    rng: Any = random,
    sleep: Callable[[float], None] = time.sleep,
    on_attempt: Callable[[int], object] | None = None,
    on_poll: OnPoll | None = None,
) -> RegionOutcome:
    """Export one region of `portal` (its shape, or a base URL for the simplest portal); returns a
    RegionOutcome (status "ok" or "unsolvable") or raises. The delivering attempt's records go to
    `sink`, whose every call starts afresh."""
    out = RegionOutcome(str(day), region)

    def fetch() -> Delivery:
        out.attempts += 1
        if on_attempt is not None:
            on_attempt(out.attempts)
        return export_once(
            out.day,
            region,
            portal,
            solver,
            sink=sink,
            http_timeout_s=http_timeout_s,
            on_task=out.task_ids.append,
            on_poll=on_poll,
            on_repost=out.reposted_posts.append,
        )

    def log_retry(state: tenacity.RetryCallState) -> None:
        error, n, wait = state.outcome.exception() if state.outcome else "?", state.attempt_number, state.upcoming_sleep
        log.warning(
            "day %s region %s: %s (attempt %d of %d); retrying in %.1f s", out.day, region, error, n, attempts, wait
        )

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=backoff(retry_base_s, retry_jitter_s, rng),
        retry=tenacity.retry_if_exception_type(TransientError),
        sleep=sleep,
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        return retrying(Attempt(out, fetch))
    except TransientError as err:
        raise TransientError(err.code, f"{err.detail} (gave up after {attempts} attempts)") from None
    finally:
        out.idle_slot_seconds = retrying.statistics.get("idle_for", 0.0)
