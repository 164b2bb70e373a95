"""One pass at one region of the partner portal, inside one HTTP session.

Page, solve and post share a session because the portal ties the form to the cookie of the page
it served, and the token must be posted at once: it lives two minutes and verifies once.
"""

import logging
from contextlib import nullcontext
from html.parser import HTMLParser
from typing import NamedTuple

import requests

from .errors import PermanentError, TokenRefused, TransientError

log = logging.getLogger(__name__)

KNOWN_REGIONS = ("north", "south", "east", "west")
_TRY_AGAIN = (408, 429)  # timeouts and rate limits say nothing about the page or the token


class Delivery(NamedTuple):
    records: list
    task_id: str
    solve_seconds: float


class _SitekeyParser(HTMLParser):
    sitekey = None

    def handle_starttag(self, tag, attrs):
        if self.sitekey is None:
            self.sitekey = dict(attrs).get("data-sitekey") or None


def find_sitekey(html):
    parser = _SitekeyParser()
    parser.feed(html)
    return parser.sitekey


def _http(session, method, url, what, timeout, **kwargs):
    failure = None
    try:
        resp = session.request(method, url, timeout=timeout, **kwargs)
    except requests.RequestException as exc:
        failure = type(exc).__name__  # raised outside the handler: no chained traceback
    if failure:
        raise TransientError("PORTAL_NETWORK_ERROR", f"{failure} on {what}")
    if resp.status_code >= 500 or resp.status_code in _TRY_AGAIN:
        raise TransientError(f"PORTAL_HTTP_{resp.status_code}", what)
    return resp


def export_once(day, region, base_url, solver, *, http_timeout_s=30.0, session=None, on_task=None, on_poll=None):
    """Load the export page, solve its reCAPTCHA, post the form; returns the records."""
    base_url = base_url.rstrip("/")
    what = f"day {day} region {region}"
    with nullcontext(session) if session else requests.Session() as s:
        page = _http(
            s,
            "GET",
            f"{base_url}/export",
            f"export page of {what}",
            http_timeout_s,
            params={"day": day, "region": region},
        )
        if page.status_code >= 400:
            raise PermanentError(f"PORTAL_HTTP_{page.status_code}", f"export page of {what} at {page.url}")
        sitekey = find_sitekey(page.text)
        if not sitekey:
            raise PermanentError("NO_SITEKEY", f"no data-sitekey on the export page of {what} at {page.url}")

        token, task_id, seconds = solver.solve(
            {"googlekey": sitekey, "pageurl": page.url}, on_submit=on_task, on_poll=on_poll
        )
        log.info("%s: CaptchaAI task %s solved in %.1f s", what, task_id, seconds)
        resp = _http(
            s,
            "POST",
            f"{base_url}/export",
            f"form post of {what}",
            http_timeout_s,
            data={"day": day, "region": region, "g-recaptcha-response": token},
        )
        del token  # single use: nothing of it outlives the post
        if resp.status_code >= 400:
            solver.report_bad(task_id)
            raise TokenRefused(f"PORTAL_HTTP_{resp.status_code}", f"token of task {task_id} refused for {what}")
        try:
            records = resp.json()["records"]
        except (ValueError, KeyError, TypeError):
            records = None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise PermanentError(
                "PORTAL_BAD_ANSWER", f"the form post of {what} did not answer JSON with a records list"
            )
        return Delivery(records, task_id, seconds)
