"""A client for CaptchaAI's in.php / res.php protocol, for reCAPTCHA v2. The key travels only in
POST bodies: requests quotes URLs in its exceptions, and servers log query strings."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from . import ratelimit
from .errors import (
    NO_SLOT,
    NOT_READY,
    ZERO_BALANCE,
    BusyThreads,
    ExportError,
    KeyLevelError,
    TransientError,
    classify,
)
from .inflight import Flight, InFlight, Settle

if TYPE_CHECKING:
    from .breaker import KeyBreaker
    from .gate import Gate

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://ocr.captchaai.com"
_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
NETWORK_ERROR = "NETWORK_ERROR"
# A submit the service failed on its side made no task: sent again at once, this many times. A reset
# or timeout after the request left stays an attempt: a task may exist.
SUBMIT_RESENDS = 2
_SERVER_SAID_RETRY = frozenset({"ERROR_SERVER_ERROR", "ERROR_INTERNAL_SERVER_ERROR"})
OnSubmit = Callable[[str], object]  # (task id)
OnPoll = Callable[[str, int, float], object]  # (task id, polls so far, seconds polled)


class Answer(NamedTuple):
    ok: bool
    value: Any  # the payload when ok, else the error code


class Solve(NamedTuple):
    token: str
    task_id: str
    seconds: float


class Reply(NamedTuple):
    answer: Answer
    detail: str  # the exception's class name on a network error, else ""
    unsent: bool  # the connection failed before the request left: the service saw nothing


def _never_sent(exc: requests.RequestException) -> bool:
    """Refused or unreachable before a byte was sent (urllib3 raises these only while connecting)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(reason, NewConnectionError | ConnectTimeoutError)


def resendable(reply: Reply) -> bool:
    code = str(reply.answer.value)
    return reply.unsent or code in _SERVER_SAID_RETRY or re.fullmatch(r"HTTP_5\d\d", code) is not None


def normalize(resp: requests.Response) -> Answer:
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


@dataclass(eq=False)
class CaptchaAI:
    """Submits reCAPTCHA v2 tasks and polls them to a token, within one deadline per solve."""

    api_key: str
    api_base: str = DEFAULT_API_BASE
    _: KW_ONLY
    timeout_s: float = 120.0
    first_poll_s: float = 15.0
    poll_every_s: float = 5.0
    http_timeout_s: float = 30.0
    session: requests.Session = field(default_factory=requests.Session)
    breaker: KeyBreaker | None = None
    inflight: InFlight | None = None  # taken from the gate when there is one
    gate: Gate | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    resent: list[str] = field(default_factory=list, init=False)  # codes of submits sent again at once
    busy_waits: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not self.api_key:
            raise KeyLevelError("NO_API_KEY", "set CAPTCHAAI_API_KEY")
        self.api_base = self.api_base.rstrip("/")
        self.inflight = self.gate.inflight if self.gate is not None else self.inflight
        if self.inflight is not None:
            self.settles(self.inflight)

    def settles(self, inflight: InFlight) -> None:
        """`inflight` judges the solves that processes left by this client's deadlines and polls."""
        inflight.settle = Settle(self.timeout_s, self.http_timeout_s, self.ended, self.poll_every_s)

    def __repr__(self) -> str:
        return f"CaptchaAI(api_base={self.api_base!r})"

    def ready(self) -> None:
        """Raise what would stop a solve (an open breaker, a busy plan), before a page is loaded for it."""
        if self.breaker is not None:
            self.breaker.check()
        if self.gate is not None:
            self.gate.check()

    def _call(self, endpoint: str, fields: dict[str, Any], checked: bool = True, until: float | None = None) -> Reply:
        """Every request: the timeout, the breaker (`checked=False` for polls: a refused key answers
        a poll once and ends the solve), a rate limit waited out until `until` (a solve's deadline;
        None: `timeout_s` from now) and one shape of answer."""
        if checked and self.breaker is not None:
            self.breaker.check()
        url, data = f"{self.api_base}/{endpoint}", {"key": self.api_key, "json": 1, **fields}
        until = self.clock() + self.timeout_s if until is None else until
        try:
            resp = ratelimit.send(
                lambda: self.session.post(url, timeout=self.http_timeout_s, data=data),
                until,
                f"CaptchaAI {endpoint}",
                clock=self.clock,
                sleep=self.sleep,
            )
        except requests.RequestException as exc:
            # a reply, not an error raised here: no traceback chains the message that quotes the URL
            return Reply(Answer(False, NETWORK_ERROR), type(exc).__name__, _never_sent(exc))
        return Reply(normalize(resp), "", False)

    def _error(self, code: str, detail: str = "", cls: type[ExportError] | None = None) -> ExportError:
        err = cls(code, detail) if cls is not None else classify(code, detail)
        if isinstance(err, KeyLevelError) and self.breaker is not None:
            err = type(err)(code, self.breaker.trip(code, detail))
        return err

    def _send_submit(self, fields: dict[str, Any], until: float | None) -> Reply:
        for resends_left in range(SUBMIT_RESENDS, -1, -1):
            reply = self._call("in.php", fields, until=until)
            if reply.answer.ok or not resendable(reply) or not resends_left:
                return reply
            code = str(reply.answer.value)
            self.resent.append(code)
            unsent = " before it left" if reply.unsent else ""
            log.warning("CaptchaAI submit failed with %s%s; sending it again at once", code, unsent)
        raise AssertionError("unreachable")

    def submit(self, params: dict[str, Any], until: float | None = None) -> str:
        """Start a task; returns its id. Tells a busy plan from no active plan; a rate limit waited until `until`."""
        fields = {"method": "userrecaptcha", **params}
        idle = True  # no thread working at either refusal: how a key without an active plan looks
        for _ in range(2):
            (ok, value), detail, _ = self._send_submit(fields, until)
            if ok:
                return str(value)
            if value == NO_SLOT and self.inflight is not None:
                self.inflight.poke()  # every thread busy, as the service says outright: the plan is fuller
            if value != ZERO_BALANCE:
                raise self._error(value, detail or "in.php")
            if self.inflight is not None:
                self.inflight.poke()  # the plan is fuller than the cap assumed
            threads, working = self.threads()
            if working >= threads:
                # our solves stay under the cap: someone else uses the key (or a killed run's tasks)
                log.warning(
                    "CaptchaAI refused a submit with %s: all %d plan threads busy (%d working): "
                    "another consumer is using this key",
                    ZERO_BALANCE,
                    threads,
                    working,
                )
                raise BusyThreads(ZERO_BALANCE, f"all {threads} plan threads busy")
            idle = idle and working == 0
        if not idle:
            # the plan is active, its threads freed and taken again: busy, not "no plan" (no breaker)
            raise BusyThreads(ZERO_BALANCE, f"refused twice while {working} of {threads} plan threads worked")
        detail = f"refused twice with {threads - working} of {threads} threads free: no active plan"
        raise self._error(ZERO_BALANCE, detail, KeyLevelError)

    def poll(self, task_id: str, deadline: float, on_poll: OnPoll | None = None, since: float | None = None) -> str:
        """Poll one task (first_poll_s after `since`, its submit's answer, else now; then every
        poll_every_s) until its token or the deadline; transient answers keep polling: its thread is
        paid for already."""
        start = self.clock() if since is None else since
        tick = start + self.first_poll_s
        polls = 0
        while tick <= deadline:
            self.sleep(max(0.0, tick - self.clock()))
            (ok, value), detail, _ = self._call("res.php", {"action": "get", "id": task_id}, False, deadline)
            polls += 1
            if ok:
                return str(value)
            if on_poll is not None:
                on_poll(task_id, polls, self.clock() - start)
            if value != NOT_READY:
                err = self._error(value, detail or f"res.php task {task_id}")
                if not isinstance(err, TransientError):
                    raise err
                log.warning("CaptchaAI task %s: transient answer %s while polling; polling on", task_id, value)
            tick = max(tick + self.poll_every_s, self.clock())
        raise TransientError("POLL_DEADLINE", f"task {task_id} not solved within {self.timeout_s:g} s")

    def solve(self, params: dict[str, Any], on_submit: OnSubmit | None = None, on_poll: OnPoll | None = None) -> Solve:
        """Submit and poll; returns (token, task_id, seconds from submit to token). The solve is in
        flight from before its submit to its last poll (past it, when the process stops first); with a
        gate it waits for a place under the cap, and after a submit refused for busy threads for a
        free thread (no attempt spent)."""
        busy_since: float | None = None
        while True:
            with self._in_flight() as flight:
                start = self.clock()
                try:
                    task_id = self.submit(params, start + self.timeout_s)
                except BusyThreads as err:
                    if self.gate is None:
                        raise
                    refused = err
                else:
                    answered = self.clock()  # the first poll counts from here: the mark's write waits in it
                    flight.submitted(task_id)
                    log.info("CaptchaAI task %s submitted", task_id)
                    if on_submit is not None:
                        on_submit(task_id)
                    token = self.poll(task_id, start + self.timeout_s, on_poll, answered)
                    return Solve(token, task_id, self.clock() - start)
            busy_since = busy_since or self.gate.clock()
            self.busy_waits += 1
            log.warning("CaptchaAI refused a submit: %s; waiting for a free thread (no attempt spent)", refused.detail)
            self.gate.after_refusal(busy_since, refused.detail, self.threads, self.poll_every_s)

    def _in_flight(self) -> contextlib.AbstractContextManager[Flight]:
        if self.gate is not None:
            return self.gate.solving()
        return self.inflight.flight() if self.inflight is not None else contextlib.nullcontext(Flight(None, ""))

    def ended(self, task_id: str) -> bool:
        """Whether a task a stopped process left has ended at CaptchaAI (one poll, no rate limit waited): ready,
        unsolvable or unknown to it. No answer, or a refused key, tells nothing: it may still hold its thread."""
        (ok, value), _, _ = self._call("res.php", {"action": "get", "id": task_id}, False, self.clock())
        if ok:
            return True
        return value != NOT_READY and not isinstance(classify(value), TransientError | KeyLevelError)

    def threads(self) -> tuple[int, int]:
        (ok, value), detail, _ = self._call("res.php", {"action": "threadsinfo"})
        if not ok:
            raise self._error(value, detail or "threadsinfo")
        try:
            return int(value["threads"]), int(value["working_threads"])
        except (KeyError, TypeError, ValueError):
            raise TransientError("UNRECOGNIZED_ANSWER", "threadsinfo without threads/working_threads") from None

    def report_bad(self, task_id: str) -> bool:
        """Tell CaptchaAI a token was refused; best effort."""
        (ok, value), _, _ = self._call("res.php", {"action": "reportbad", "id": task_id})
        if not ok:
            log.warning("CaptchaAI reportbad for task %s answered %s", task_id, value)
        return ok
