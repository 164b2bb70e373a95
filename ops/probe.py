"""`make probe DAY=... [REGION=...]`: the operator's first look at a portal, sending nothing to CaptchaAI:
the export page loaded as an export would, and what it would solve and post (hidden values masked)."""

import argparse
import datetime
from collections.abc import Callable
from typing import Any

import requests

from portal_export.portal import HANDLING, Prepared, prepare
from portal_export.portal.session import TOKEN_FIELD
from tasks import config
from tasks.region import portal_login
from tasks.secrets import MASK, say

NO_WIDGET, NO_FORM = 1, 1


def describe(ready: Prepared) -> list[str]:
    lines = [f"page:         {ready.page.url}"]
    if ready.frame:
        lines.append(f"frame:        {ready.frame} (the widget is in this frame of the portal)")
    widget, post = ready.widget, ready.post
    if widget is None or post is None:
        return lines
    fields = []
    for name, value in post.fields:
        shown = "<token>" if name == TOKEN_FIELD else MASK if name in post.hidden else value
        fields.append(f"{name}={shown}" + (" (added)" if name in post.added and name != TOKEN_FIELD else ""))
    solve = " ".join(f"{k}=..." if k == "data-s" else f"{k}={v}" for k, v in widget.solve_params().items())
    lines += [
        f"pageurl:      {ready.pageurl}",
        f"sitekey:      {widget.sitekey}",
        f"widget kind:  {widget.kind}",
        f"data-s:       {'present' if widget.data_s is not None else 'absent'}",
        f"CaptchaAI:    {solve} pageurl=<the pageurl above>",
        f"form:         {post.method} {post.url}" + ("" if post.from_form else " (no <form> around the widget)"),
        f"fields:       {', '.join(fields)}",
        f"answer:       {HANDLING}",
    ]
    return lines


def cmd_probe(args: argparse.Namespace, parse_day: Callable[[str, str], datetime.date]) -> int:
    day = parse_day("DAY", args.day)
    region = config.check_region(args.region) if args.region else config.regions()[0]
    base_url = config.portal_base_url().rstrip("/")
    login = portal_login()
    print(f"probe:        day {day} region {region} at {base_url}")
    who = f"{login.username} at {base_url}{login.path}" if login else "none (PORTAL_USERNAME not set)"
    print(f"login:        {who}")
    with requests.Session() as session:
        ready = prepare(
            session, base_url, day.isoformat(), region, http_timeout_s=config.captchaai().http_timeout_s, login=login
        )
    print("\n".join(describe(ready)), flush=True)
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
    return 0


def add_parser(sub: Any, parse_day: Callable[[str, str], datetime.date]) -> None:
    p = sub.add_parser("probe", help="load the export page and print what an export would solve and post")
    p.add_argument("day")
    p.add_argument("--region", default=None, help="default: the first of [portal] regions")
    p.set_defaults(func=lambda args: cmd_probe(args, parse_day))
