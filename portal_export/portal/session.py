"""One pass at one region of the partner portal, inside one HTTP session: login, page, solve, post.

Page, solve and post share a session because the portal ties the form to the cookie of the page
it served, and the token must be posted at once: it lives two minutes and verifies once.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import requests
from requests import Session

from .. import ratelimit
from ..captchaai import OnPoll, OnSubmit
from ..errors import LoginRefused, PermanentError, TokenRefused, TransientError
from .answers import read_answer
from .form_fill import fill
from .page import Page, Widget, parse_page
from .record_checks import checked
from .shape import Login, PortalShape, shape_of

log = logging.getLogger(__name__)

_TRY_AGAIN = (408, 429)  # timeouts and rate limits say nothing about the page or the token
RATE_LIMIT_WAIT_S = 120.0  # a page's rate limit is waited out this long at most (a solve's deadline, by default)
TOKEN_LIFE_S = 120.0  # a reCAPTCHA token verifies within two minutes: the form post's rate limit waits less
# A gateway's answer to the form post (the proxy reached no healthy app): the token is most likely
# unspent, so it is posted again at once, once, instead of a fresh solve after a backoff.
_GATEWAY = frozenset({"PORTAL_HTTP_502", "PORTAL_HTTP_503", "PORTAL_HTTP_504"})
TOKEN_FIELD = "g-recaptcha-response"
Fields = list[tuple[str, str]]  # a form's (name, value) pairs, in order


class Solver(Protocol):
    def solve(
        self,
        params: dict[str, str],
        on_submit: OnSubmit | None = ...,
        on_poll: OnPoll | None = ...,
    ) -> tuple[str, str, float]: ...

    def report_bad(self, task_id: str) -> bool: ...


# Takes the records of an answer as they are read (each its line of the day file) and returns
# how many it took; an error raised while it reads leaves the attempt failed.
Sink = Callable[[Iterator[str]], int]


class Delivery(NamedTuple):
    rows: int
    task_id: str
    solve_seconds: float


@dataclass(frozen=True)
class Post:
    """The request that carries the token: the page's form, or the simple post without one."""

    method: str
    url: str
    fields: tuple[tuple[str, str], ...]  # in order, the token's field included with an empty value
    hidden: frozenset[str]
    added: frozenset[str]  # fields the form lacked: day, region (or export_fields'), the token
    from_form: bool
    set: frozenset[str] = frozenset()  # fields [portal] export_fields set
    problems: tuple[str, ...] = ()  # why the post cannot work (PORTAL_FIELD_VALUE), said before a solve

    def data(self, token: str) -> Fields:
        return [(n, token if n == TOKEN_FIELD else v) for n, v in self.fields]


@dataclass(frozen=True)
class Prepared:
    """What the loaded page asks for: the widget to solve, its pageurl, the post to make."""

    page: Page  # the export page as loaded
    pageurl: str  # of the page (or frame) holding the widget
    widget: Widget | None
    post: Post | None
    frame: str | None = None  # the frame's URL, where the widget is in one


def http(
    session: Session,
    method: str,
    url: str,
    what: str,
    timeout: float,
    fields: Fields | None = None,
    until: float | None = None,
    **kwargs: Any,
) -> requests.Response:
    """One request; `fields` go in the query of a GET, in the body otherwise, as a form sends them. A rate limit is
    waited out until `until` (time.monotonic; None: RATE_LIMIT_WAIT_S from now), then it is a 429 like any other."""
    if fields is not None:
        kwargs["params" if method == "GET" else "data"] = fields
    until = time.monotonic() + RATE_LIMIT_WAIT_S if until is None else until
    failure = None
    try:
        resp = ratelimit.send(
            lambda: session.request(method, url, timeout=timeout, **kwargs),
            until,
            f"the portal's {what}",
            clock=time.monotonic,
            sleep=time.sleep,
        )
    except requests.RequestException as exc:
        failure = type(exc).__name__  # raised outside the handler: no chained traceback
    if failure:
        raise TransientError("PORTAL_NETWORK_ERROR", f"{failure} on {what}")
    if resp.status_code >= 500 or resp.status_code in _TRY_AGAIN:
        raise TransientError(f"PORTAL_HTTP_{resp.status_code}", what)
    return resp


def log_in(session: Session, base_url: str, login: Login, timeout: float) -> None:
    """Post the login page's form with the credentials; LoginRefused when the form comes back."""
    if login.breaker is not None:
        login.breaker.check()
    url = base_url + login.path
    what = f"login page {url}"
    resp = http(session, "GET", url, what, timeout)
    if resp.status_code >= 400:
        raise PermanentError(f"PORTAL_HTTP_{resp.status_code}", what)
    form = parse_page(resp.text, resp.url).login_form
    if form is None:
        raise PermanentError("PORTAL_NO_LOGIN_FORM", f"no form with a password input at {resp.url}")
    fields, user_set, password_set = [], False, False
    for f in form.fields:
        value = f.value
        if f.kind == "password" and not password_set:
            value, password_set = login.password, True
        elif f.kind in ("text", "email", "") and not f.hidden and not user_set:
            value, user_set = login.username, True
        fields.append((f.name, value))
    if not (user_set and password_set):
        raise PermanentError(
            "PORTAL_NO_LOGIN_FORM", f"the login form at {resp.url} has no named username/password input"
        )
    answer = http(session, form.method, form.action, f"login post to {form.action}", timeout, fields)
    if parse_page(answer.text, answer.url).login_form is not None:
        detail = f"the portal showed its login form again after the login of {login.username!r} at {url}"
        if login.breaker is not None:
            detail = login.breaker.trip(LoginRefused.CODE, detail)
        raise LoginRefused(LoginRefused.CODE, detail)
    if answer.status_code >= 400:
        raise PermanentError(f"PORTAL_HTTP_{answer.status_code}", f"login post to {form.action}")
    log.info("logged in to %s as %s", base_url, login.username)


def _post_for(page: Page, portal: PortalShape, day: datetime.date, region: str) -> Post:
    form, named = page.form, portal.field_values(day, region)
    if form is None:  # no form around the widget: the portal's simple post, or the fields export_fields names
        fields = (*(named or [("day", day.isoformat()), ("region", region)]), (TOKEN_FIELD, ""))
        added = frozenset(n for n, _ in fields)
        return Post("POST", f"{portal.base_url}/export", fields, frozenset(), added, False, frozenset(dict(named)))
    fields_list = [(f.name, f.value) for f in form.fields if f.name != TOKEN_FIELD]
    hidden = frozenset(f.name for f in form.fields if f.hidden)
    if named:  # the form as the page gave it, the named fields set
        filled = fill(fields_list, form.selects, named)
        fields = (*filled.fields, (TOKEN_FIELD, ""))
        added = filled.added | {TOKEN_FIELD}
        return Post(form.method, form.action, fields, hidden, added, True, frozenset(dict(named)), filled.problems)
    names = {n for n, _ in fields_list}
    added_names = [n for n in ("day", "region") if n not in names]
    fields_list += [(n, day.isoformat() if n == "day" else region) for n in added_names] + [(TOKEN_FIELD, "")]
    return Post(form.method, form.action, tuple(fields_list), hidden, frozenset([*added_names, TOKEN_FIELD]), True)


def prepare(
    session: Session, portal: PortalShape | str, day: str, region: str, *, http_timeout_s: float = 30.0
) -> Prepared:
    """Log in where asked, load the export page (or the frame of the portal holding the widget)."""
    portal = shape_of(portal)
    base_url, date = portal.base_url, datetime.date.fromisoformat(day)
    what = f"day {day} region {region}"
    if portal.login is not None:
        log_in(session, base_url, portal.login, http_timeout_s)
    resp = http(session, "GET", portal.page_url(date, region), f"export page of {what}", http_timeout_s)
    if resp.status_code >= 400:
        raise PermanentError(f"PORTAL_HTTP_{resp.status_code}", f"export page of {what} at {resp.url}")
    page = holder = parse_page(resp.text, resp.url)
    frame = None
    if page.widget is None:
        for src in page.frames:
            if urlsplit(src).netloc != urlsplit(base_url).netloc:
                continue  # another site's frame: not the portal's to load
            framed = http(session, "GET", src, f"frame of the export page of {what}", http_timeout_s)
            if framed.status_code >= 400:
                raise PermanentError(f"PORTAL_HTTP_{framed.status_code}", f"frame {framed.url} of {what}")
            candidate = parse_page(framed.text, framed.url)
            if candidate.widget is not None:
                holder, frame = candidate, framed.url
                break
    widget = holder.widget
    post = _post_for(holder, portal, date, region) if widget is not None else None
    return Prepared(page, holder.url, widget, post, frame)


def export_once(
    day: str,
    region: str,
    portal: PortalShape | str,
    solver: Solver,
    *,
    sink: Sink,
    http_timeout_s: float = 30.0,
    session: Session | None = None,
    on_task: OnSubmit | None = None,
    on_poll: OnPoll | None = None,
    on_repost: Callable[[str], object] | None = None,
) -> Delivery:
    """Load the export page, solve its reCAPTCHA, post its form; the records go to `sink` as the
    answer arrives, never held whole, each checked against `record_checks` first. `on_repost(code)` hears
    of a post sent again after a gateway error."""
    what, portal = f"day {day} region {region}", shape_of(portal)
    with nullcontext(session) if session else Session() as s:
        ready = prepare(s, portal, day, region, http_timeout_s=http_timeout_s)
        if ready.widget is None or ready.post is None:
            raise PermanentError("NO_SITEKEY", f"no reCAPTCHA sitekey on the export page of {what} at {ready.page.url}")
        post = ready.post
        if post.problems:  # no solve is paid for a post that cannot work
            raise PermanentError("PORTAL_FIELD_VALUE", f"{what}: {'; '.join(post.problems)} ([portal] export_fields)")
        token, task_id, seconds = solver.solve(
            {**ready.widget.solve_params(), "pageurl": ready.pageurl}, on_submit=on_task, on_poll=on_poll
        )
        log.info("%s: CaptchaAI task %s solved in %.1f s", what, task_id, seconds)
        reposted, until = False, time.monotonic() + TOKEN_LIFE_S - http_timeout_s
        try:
            resp = http(
                s, post.method, post.url, f"form post of {what}", http_timeout_s, post.data(token), until, stream=True
            )
        except TransientError as err:
            if err.code not in _GATEWAY:
                raise
            log.warning("%s: the form post answered %s; posting the token again at once", what, err.code)
            reposted = True
            if on_repost is not None:
                on_repost(err.code)
            again = f"form post of {what}, sent again"
            resp = http(s, post.method, post.url, again, http_timeout_s, post.data(token), until, stream=True)
        del token  # single use: nothing of it outlives the post
        with resp:  # streamed: its connection goes back to the pool once read or refused
            if resp.status_code >= 400:
                if not reposted:  # after a gateway error our own first post may have spent it: not CaptchaAI's fault
                    solver.report_bad(task_id)
                raise TokenRefused(f"PORTAL_HTTP_{resp.status_code}", f"token of task {task_id} refused for {what}")
            lines = read_answer(resp, f"the form post of {what}")
            if wanted := portal.wanted(datetime.date.fromisoformat(day), region):
                lines = checked(lines, wanted, f"the form post of {what}")
            return Delivery(sink(lines), task_id, seconds)
