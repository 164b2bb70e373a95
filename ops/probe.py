"""`make probe DAY=... [REGION=...]`: the operator's first look at a portal, sending nothing to CaptchaAI:
the export page loaded as an export would, what it would solve and post (hidden values masked), and
whether `[portal] export_fields` fits the form."""

import argparse
import datetime
from collections.abc import Callable
from typing import Any

import requests

from portal_export.portal import HANDLING, PortalShape, Prepared, prepare
from portal_export.portal.session import TOKEN_FIELD, Post
from tasks import config
from tasks.portal_shape import portal_shape
from tasks.secrets import MASK, say

NO_WIDGET, NO_FORM, FIELDS_DO_NOT_FIT = 1, 1, 1


def shown_fields(post: Post) -> str:
    fields = []
    for name, value in post.fields:
        shown = "<token>" if name == TOKEN_FIELD else MASK if name in post.hidden - post.set else value
        mark = "added" if name in post.added and name != TOKEN_FIELD else "set" if name in post.set else ""
        fields.append(f"{name}={shown}" + (f" ({mark})" if mark else ""))
    return ", ".join(fields)


def describe(ready: Prepared) -> list[str]:
    lines = [f"page:         {ready.page.url}"]
    if ready.frame:
        lines.append(f"frame:        {ready.frame} (the widget is in this frame of the portal)")
    widget, post = ready.widget, ready.post
    if widget is None or post is None:
        return lines
    solve = " ".join(f"{k}=..." if k == "data-s" else f"{k}={v}" for k, v in widget.solve_params().items())
    lines += [
        f"pageurl:      {ready.pageurl}",
        f"sitekey:      {widget.sitekey}",
        f"widget kind:  {widget.kind}",
        f"data-s:       {'present' if widget.data_s is not None else 'absent'}",
        f"CaptchaAI:    {solve} pageurl=<the pageurl above>",
        f"form:         {post.method} {post.url}" + ("" if post.from_form else " (no <form> around the widget)"),
        f"fields:       {shown_fields(post)}",
        f"answer:       {HANDLING}",
    ]
    return lines


def cmd_probe(args: argparse.Namespace, parse_day: Callable[[str, str], datetime.date]) -> int:
    day = parse_day("DAY", args.day)
    region = config.check_region(args.region) if args.region else config.regions()[0]
    portal = portal_shape()
    base_url, login = portal.base_url, portal.login
    print(f"probe:        day {day} region {region} at {base_url}")
    who = f"{login.username} at {base_url}{login.path}" if login else "none (PORTAL_USERNAME not set)"
    print(f"login:        {who}")
    print(f"export page:  {portal.export_page.text} (region value {portal.value_of(region)!r})")
    with requests.Session() as session:
        ready = prepare(session, portal, day.isoformat(), region, http_timeout_s=config.captchaai().http_timeout_s)
    lines = describe(ready) + ([fit_line(ready.post)] if ready.post is not None else [])
    print("\n".join([*lines, checks_line(portal, day, region)]), flush=True)
    if ready.widget is None:
        frames = f" nor in its {len(ready.page.frames)} frame(s) of the portal" if ready.page.frames else ""
        say(
            f"error: no reCAPTCHA widget (data-sitekey, anchor iframe or grecaptcha.render) on {ready.page.url}"
            f"{frames}; page title {ready.page.title or 'untitled'!r}"
            + ("; it is a login form: set PORTAL_USERNAME and PORTAL_PASSWORD" if ready.page.login_form else "")
        )
        return NO_WIDGET
    if ready.post is not None and not ready.post.from_form:
        say(f"error: no <form> around the widget on {ready.pageurl}: an export would make the simple post above")
        return NO_FORM
    return fits(ready.post) if ready.post is not None else 0


def checks_line(portal: PortalShape, day: datetime.date, region: str) -> str:
    wanted = ", ".join(f"{name}={value}" for name, value in portal.wanted(day, region))
    return f"record checks: {wanted or 'none ([portal] record_checks is empty)'}"


def fit_line(post: Post) -> str:
    if not post.set:
        return "export_fields: none ([portal] export_fields is empty: day and region added where the form lacks them)"
    if post.problems:
        return f"export_fields: does not fit the form ({len(post.problems)} value(s) no <select> offers, below)"
    lacked = sorted(post.added & post.set)
    return "export_fields: fits the form" + (f"; adds {', '.join(lacked)}, which it lacks" if lacked else "")


def fits(post: Post) -> int:
    """Whether [portal] export_fields fits the form: a value no <select> offers fails; a field added is said."""
    for name in sorted(post.added & post.set):
        say(f"warning: the form has no field {name!r}: export_fields adds it (a mistyped name leaves the page's own)")
    for problem in post.problems:
        say(f"error: {problem}: an export would fail with PORTAL_FIELD_VALUE before its solve")
    return FIELDS_DO_NOT_FIT if post.problems else 0


def add_parser(sub: Any, parse_day: Callable[[str, str], datetime.date]) -> None:
    p = sub.add_parser("probe", help="load the export page and print what an export would solve and post")
    p.add_argument("day")
    p.add_argument("--region", default=None, help="default: the first of [portal] regions")
    p.set_defaults(func=lambda args: cmd_probe(args, parse_day))
