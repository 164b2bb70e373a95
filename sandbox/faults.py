"""Deciding which requests fault, and the canned bad answers they get."""

from __future__ import annotations

import math
import random
import time
from email.utils import formatdate

from werkzeug.wrappers import Response

from .config import ENDPOINTS, FaultPlan


class ResetConnection(BaseException):
    """Raised by an app to have the request handler reset the TCP connection.

    A BaseException so werkzeug's run_wsgi (which turns every Exception into a
    500 page) lets it through to our handler; see wsgi_server.ResettingHandler.
    """


class FaultInjector:
    """Per-endpoint request counters and seeded RNGs; not thread-safe (the state lock guards it)."""

    def __init__(self, plans: dict, seed: int):
        self.plans = dict(plans)
        self._index = {e: 0 for e in ENDPOINTS}
        # one stream per endpoint, so traffic on one endpoint never shifts another's faults
        self._rng = {e: random.Random(f"{seed}|fault|{e}") for e in ENDPOINTS}

    def pick(self, endpoint: str, action: str | None = None) -> tuple[str | None, FaultPlan | None]:
        plan = self.plans.get(endpoint)
        if plan is not None and plan.actions and action not in plan.actions:
            return None, None  # not a request the plan counts (a poll's plan skips threadsinfo)
        index = self._index[endpoint]
        self._index[endpoint] += 1
        if plan is None:
            return None, None
        # draw for every request, so a scheduled fault does not shift the rate stream
        roll, choice = self._rng[endpoint].random(), self._rng[endpoint].random()
        if index in plan.schedule:
            return plan.schedule[index], plan
        if plan.kinds and roll < plan.rate:
            return plan.kinds[int(choice * len(plan.kinds))], plan
        return None, None


_HTML = {
    500: "<html><head><title>500 Internal Server Error</title></head><body><center>"
    "<h1>500 Internal Server Error</h1></center><hr><center>nginx</center></body></html>",
    502: "<html><head><title>502 Bad Gateway</title></head><body><center>"
    "<h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>",
}


def html_error(status: int) -> Response:
    """What a load balancer in front of the service answers."""
    return Response(_HTML[status], status=status, mimetype="text/html")


def rate_limited(kind: str, seconds: float) -> tuple[Response, float]:
    """A rate limit's answer, and until when (time.time) it asks the client to wait."""
    wait = max(1, math.ceil(seconds))
    until = time.time() + wait
    headers = {"Retry-After": str(wait)}
    if kind == "rate_limit_date":
        until = math.floor(until)
        headers = {"Retry-After": formatdate(until, usegmt=True)}
    elif kind == "rate_limit_bare":
        headers, until = {}, time.time()
    status = 503 if kind == "unavailable" else 429
    return Response("Too Many Requests", status=status, headers=headers, mimetype="text/plain"), until
