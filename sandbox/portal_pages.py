"""The HTML the sandbox portal serves: the export page in every variant, its frame, the login page.

Shaped like real portals: several forms on a page, uppercase tags and attributes, entities in
values, a third-party frame beside the portal's own.
"""

from __future__ import annotations

import html
import secrets
from urllib.parse import urlencode

VIEW_STATE_FIELDS = ("__VIEWSTATE", "__EVENTVALIDATION")
# what the action variant's visible fields must post (None: must not be posted: unchecked, disabled)
ACTION_FIELDS = {
    "layout": "long",
    "comment": 'Q3 & Q4 <draft> "final"',
    "include_notes": "yes",
    "include_totals": None,
    "disabled_field": None,
}

# The simplest portal, served when a region has no variant (the contract's first page).
SIMPLE = """<!doctype html>
<html><head><title>Daily export {day} {region}</title>
<script src="https://www.google.com/recaptcha/api.js" async defer></script></head>
<body><h1>Daily report export</h1>
<form method="post" action="/export">
<input type="hidden" name="day" value="{day}">
<input type="hidden" name="region" value="{region}">
<div class="g-recaptcha" data-sitekey="{sitekey}"></div>
<button type="submit">Export</button>
</form></body></html>
"""

_HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<script src="https://www.google.com/recaptcha/{api}" async defer></script></head>
<body><header><FORM method="get" action="/search"><INPUT type="search" name="q" value=""></FORM></header>
<h1>Daily report export</h1>
"""


def _esc(value: str) -> str:
    return html.escape(value, quote=True)


def view_state() -> dict:
    """Opaque ASP.NET-like state: +, / and = in the values, which must come back byte for byte."""
    return {name: secrets.token_urlsafe(48).replace("-", "+").replace("_", "/") + "==" for name in VIEW_STATE_FIELDS}


def widget(variants: frozenset, sitekey: str, data_s: str | None) -> str:
    size = "invisible" if "invisible" in variants else "normal"
    if "anchor" in variants:  # what a page saved after the widget rendered holds
        api = "enterprise" if "enterprise" in variants else "api2"
        query = urlencode(
            {"ar": 1, "k": sitekey, "co": "aHR0cDovL2xvY2FsaG9zdA..", "hl": "en", "v": "pCoGBhjs", "size": size}
        )
        return f'<IFRAME title="reCAPTCHA" SRC="https://www.google.com/recaptcha/{api}/anchor?{_esc(query)}" width="304" height="78"></IFRAME>'
    if "render" in variants:
        grecaptcha = "grecaptcha.enterprise" if "enterprise" in variants else "grecaptcha"
        opts = f"'sitekey' : '{sitekey}', 'callback': onDone" + (", size: 'invisible'" if size == "invisible" else "")
        return (
            '<div id="captcha-box"></div>\n'
            f"<script>var onload = function () {{ {grecaptcha}.render('captcha-box', {{ {opts} }}); }};</script>"
        )
    attrs = f'class="g-recaptcha" DATA-SITEKEY="{sitekey}" data-callback="onDone"'
    if size == "invisible":
        attrs += ' data-size="INVISIBLE"'
    if data_s is not None:
        attrs += f' data-s="{_esc(data_s)}"'
    return f"<div {attrs}></div>"


def export_form(day: str, region: str, variants: frozenset, sitekey: str, fields: dict, data_s: str | None) -> str:
    """The export page holding the widget. `fields`: the hidden values this page hands out."""
    if not variants:
        return SIMPLE.format(day=day, region=_esc(region), sitekey=sitekey)
    method, action = ("get", "/export/run") if "get" in variants else ("post", "/export")
    if "action" in variants:
        action = "/reports/run"
    api = "enterprise.js" if "enterprise" in variants else "api.js"
    parts = [_HEAD.format(title=f"Daily export {day} {_esc(region)}", api=api)]
    parts.append(f'<form id="export" method="{method}" action="{action}">')
    for name, value in fields.items():
        parts.append(f'<input type="hidden" name="{name}" value="{_esc(value)}">')
    if "action" in variants:
        # day and region travel in the view state: the form has none of its own
        parts.append(
            '<select name="layout"><option value="wide">Wide<option value="long" selected>Long</select>\n'
            f'<textarea name="comment">\n{_esc(ACTION_FIELDS["comment"])}</textarea>\n'
            '<input type="checkbox" name="include_notes" value="yes" checked>'
            '<input type="checkbox" name="include_totals" value="yes">'
            '<input type="text" name="disabled_field" value="x" disabled>'
        )
    else:
        parts.append(f'<input type="hidden" name="day" value="{day}">')
        parts.append(f'<input type="hidden" name="region" value="{_esc(region)}">')
    parts.append(widget(variants, sitekey, data_s))
    parts.append('<button type="submit" name="go" value="1">Export</button></form>')
    parts.append('<form method="post" action="/feedback"><textarea name="text"></textarea></form></body></html>\n')
    return "\n".join(parts)


def frame_page(day: str, region: str) -> str:
    src = "/export/form?" + urlencode({"day": day, "region": region})
    return (
        f"<!doctype html><html><head><title>Reports {day}</title></head><body>\n"
        '<iframe src="https://www.youtube-nocookie.com/embed/help" title="how to export"></iframe>\n'
        f'<iframe src="{_esc(src)}" title="export form" width="100%"></iframe>\n</body></html>\n'
    )


def login_page(csrf: str, failed: bool) -> str:
    error = '<p class="error">Invalid e-mail or password.</p>\n' if failed else ""
    return (
        "<!doctype html><html><head><title>Sign in &middot; Partner portal</title></head><body>\n"
        '<form method="get" action="/search"><input type="text" name="q"></form>\n'
        f"{error}"
        '<form method="post" action="/login" class="login">\n'
        f'<input type="hidden" name="authenticity_token" value="{_esc(csrf)}">\n'
        '<input type="hidden" name="next" value="/welcome">\n'
        '<label>E-mail <input type="email" name="session[email]" autocomplete="username"></label>\n'
        '<label>Password <input type="password" name="session[password]"></label>\n'
        '<input type="checkbox" name="remember_me" value="1">\n'
        '<button type="submit" name="commit" value="Sign in">Sign in</button>\n'
        "</form></body></html>\n"
    )


WELCOME = "<!doctype html><html><head><title>Welcome</title></head><body><p>Signed in.</p></body></html>\n"
MAINTENANCE = (
    "<!DOCTYPE html><html><head><title>Scheduled maintenance</title></head>"
    "<body><h1>We'll be back soon</h1><p>Exports are paused during maintenance.</p></body></html>\n"
)
