"""HTTP 429, and 503 with `Retry-After`: the server asks for a pause, not for a new attempt. The same request is
sent again once it allows (its `Retry-After`, seconds or an HTTP date; else a doubling backoff), within a deadline
past which the answer is left for the caller to judge as the error it is."""

from __future__ import annotations

import logging
from collections.abc import Callable

import requests
from urllib3.exceptions import InvalidHeader
from urllib3.util import Retry

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 1.0  # without Retry-After: 1, 2, 4, ... s
MAX_BACKOFF_S = 30.0


def pause_asked(resp: requests.Response) -> float | None:
    """Seconds the server asks to wait before the same request (0 when it names no time); None: no pause asked."""
    value = resp.headers.get("Retry-After")
    if resp.status_code != 429 and not (resp.status_code == 503 and value is not None):
        return None
    try:
        return Retry().parse_retry_after(value) if value is not None else 0.0
    except InvalidHeader:
        return 0.0


def send(
    request: Callable[[], requests.Response],
    until: float,
    what: str,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> requests.Response:
    """`request()`, sent again for as long as the server asks for a pause that ends before `until` (on `clock`)."""
    backoff = FIRST_BACKOFF_S
    while True:
        resp = request()
        asked = pause_asked(resp)
        if asked is None:
            return resp
        wait = asked or backoff
        if clock() + wait > until:
            return resp
        backoff = min(MAX_BACKOFF_S, backoff * 2)
        resp.close()
        log.warning("%s answered HTTP %d: sending it again in %.1f s (no attempt spent)", what, resp.status_code, wait)
        sleep(wait)
