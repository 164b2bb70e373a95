"""A client for CaptchaAI's in.php / res.php protocol, for reCAPTCHA v2.

The key travels only in POST form bodies: requests puts URLs (with their query strings) into its
exception messages, and servers log query strings, so a key in a URL ends up in tracebacks and logs.
"""

import logging
import re
import time
from typing import NamedTuple

import requests

from .errors import NOT_READY, ZERO_BALANCE, KeyLevelError, TransientError, classify

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://ocr.captchaai.com"
_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")


class Answer(NamedTuple):
    """One response in one shape, whatever the service sent: JSON, plain text or an HTML page."""

    ok: bool
    value: object  # the payload when ok, else the error code


class Solve(NamedTuple):
    token: str
    task_id: str
    seconds: float


def normalize(resp):
    """Read a JSON body, a plain-text code despite json=1, or an HTML error page alike."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        if "status" not in body:  # threadsinfo answers its fields bare
            return Answer(True, body)
        request = str(body.get("request", ""))  # the live service sends task ids as numbers
        return Answer(True, request) if str(body["status"]) == "1" else Answer(False, request or "UNRECOGNIZED_ANSWER")
    text = resp.text.strip()
    if text.startswith("OK|"):
        return Answer(True, text[3:])
    if _CODE.match(text):
        return Answer(False, text)
    if resp.status_code >= 400:
        return Answer(False, f"HTTP_{resp.status_code}")
    return Answer(False, "UNRECOGNIZED_ANSWER")


class CaptchaAI:
    """Submits reCAPTCHA v2 tasks and polls them to a token, within one deadline per solve."""

    def __init__(
        self,
        api_key,
        api_base=DEFAULT_API_BASE,
        *,
        timeout_s=120.0,
        first_poll_s=15.0,
        poll_every_s=5.0,
        http_timeout_s=30.0,
        session=None,
        breaker=None,
        clock=time.monotonic,
        sleep=time.sleep,
    ):
        if not api_key:
            raise KeyLevelError("NO_API_KEY", "set CAPTCHAAI_API_KEY")
        self._key = api_key
        self.api_base = api_base.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.first_poll_s = float(first_poll_s)
        self.poll_every_s = float(poll_every_s)
        self.http_timeout_s = float(http_timeout_s)
        self._session = session or requests.Session()
        self._breaker = breaker
        self._clock = clock
        self._sleep = sleep

    def __repr__(self):
        return f"CaptchaAI(api_base={self.api_base!r})"

    def _call(self, endpoint, fields):
        """POST one request; every call goes through here for the timeout, breaker and normalizing."""
        if self._breaker is not None:
            self._breaker.check()
        failure = None
        try:
            resp = self._session.post(
                f"{self.api_base}/{endpoint}", timeout=self.http_timeout_s, data={"key": self._key, "json": 1, **fields}
            )
        except requests.RequestException as exc:
            # Raised outside the handler, so no traceback chains the message that quotes the URL.
            failure = type(exc).__name__
        if failure:
            return Answer(False, "NETWORK_ERROR"), failure
        return normalize(resp), ""

    def _error(self, code, detail="", cls=None):
        err = cls(code, detail) if cls is not None else classify(code, detail)
        if isinstance(err, KeyLevelError) and self._breaker is not None:
            self._breaker.trip(code, detail)
        return err

    def submit(self, params):
        """Start a task; returns its id. Tells a busy plan from one with no active plan."""
        fields = {"method": "userrecaptcha", **params}
        idle = True  # no thread working at either refusal: how a key without an active plan looks
        for _ in range(2):
            (ok, value), detail = self._call("in.php", fields)
            if ok:
                return str(value)
            if value != ZERO_BALANCE:
                raise self._error(value, detail or "in.php")
            threads, working = self.threads()
            if working >= threads:
                # Our own solves stay under the cap, so a full plan means someone else uses the key
                # (or a killed run's tasks still hold threads until CaptchaAI finishes them).
                log.warning(
                    "CaptchaAI refused a submit with %s: all %d plan threads busy (%d working): "
                    "another consumer is using this key",
                    ZERO_BALANCE,
                    threads,
                    working,
                )
                raise TransientError(ZERO_BALANCE, f"all {threads} plan threads busy")
            # A free thread shows: the plan may be missing, or a thread freed up since the refusal.
            idle = idle and working == 0
        if not idle:
            # Threads are working, so the plan is active: they freed and were taken again between our
            # calls (another consumer, or a killed run's solves still held). Busy, not "no plan":
            # tripping the breaker here would stop every run until an operator clears it.
            raise TransientError(ZERO_BALANCE, f"refused twice while {working} of {threads} plan threads worked")
        # Refused twice with nothing working at all: there is no active plan.
        raise self._error(
            ZERO_BALANCE,
            f"refused twice with {threads - working} of {threads} threads free: no active plan",
            KeyLevelError,
        )

    def poll(self, task_id, deadline, on_poll=None):
        """Poll one task on a fixed grid (first_poll_s, then every poll_every_s) until token or deadline.

        Transient answers keep polling the same task: its thread is paid for already.
        """
        start = self._clock()
        tick = start + self.first_poll_s
        polls = 0
        while tick <= deadline:
            self._sleep(max(0.0, tick - self._clock()))
            (ok, value), detail = self._call("res.php", {"action": "get", "id": task_id})
            polls += 1
            if ok:
                return str(value)  # the token goes straight to its post: no progress report first
            if on_poll is not None:
                on_poll(task_id, polls, self._clock() - start)
            if value != NOT_READY:
                err = self._error(value, detail or f"res.php task {task_id}")
                if not isinstance(err, TransientError):
                    raise err
                log.warning("CaptchaAI task %s: transient answer %s while polling; polling on", task_id, value)
            tick += self.poll_every_s
            tick = max(tick, self._clock())
        raise TransientError("POLL_DEADLINE", f"task {task_id} not solved within {self.timeout_s:g} s")

    def solve(self, params, on_submit=None, on_poll=None):
        """Submit and poll; returns (token, task_id, seconds from submit to token).

        `on_submit(task_id)` hears of the task as soon as it exists, so a caller can account for
        tasks whose solve then fails.
        """
        start = self._clock()
        task_id = self.submit(params)
        log.info("CaptchaAI task %s submitted", task_id)
        if on_submit is not None:
            on_submit(task_id)
        token = self.poll(task_id, start + self.timeout_s, on_poll)
        return Solve(token, task_id, self._clock() - start)

    def threads(self):
        """(plan threads, threads working now)."""
        (ok, value), detail = self._call("res.php", {"action": "threadsinfo"})
        if not ok:
            raise self._error(value, detail or "threadsinfo")
        try:
            return int(value["threads"]), int(value["working_threads"])
        except (KeyError, TypeError, ValueError):
            raise TransientError("UNRECOGNIZED_ANSWER", "threadsinfo without threads/working_threads") from None

    def report_bad(self, task_id):
        """Tell CaptchaAI a token was refused; best effort, as the report changes nothing here."""
        (ok, value), _ = self._call("res.php", {"action": "reportbad", "id": task_id})
        if not ok:
            log.warning("CaptchaAI reportbad for task %s answered %s", task_id, value)
        return ok
