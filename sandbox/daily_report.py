"""The sandbox's portal of its own shape (SandboxConfig.shape = "daily-report"), shaped like most real
reporting portals rather than like the contract's simplest one: the daily report at `/reports/daily`,
with neither day nor region in its URL; a form posted back to the page's own URL (no action) holding a
text field `report_date` written DD.MM.YYYY, a `<select name="market">` of market codes with their
labels, and a hidden `_token` bound to the session that must come back; one sitekey for the whole site.

Like a real one it answers what it was asked, defaults included: a post without `report_date` (a
mistyped field name leaves the page's own, yesterday's) answers that default day's records.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import secrets

from werkzeug.wrappers import Request, Response

from .portal_data import report_records, sitekey_for
from .state import SandboxState

PATH = "/reports/daily"
SITEKEY = sitekey_for("daily-report")  # the site's one sitekey, whatever the market
MARKETS = (
    ("NE-01", "North-East"),
    ("SE-02", "South-East"),
    ("SW-03", "South-West"),
    ("NW-04", "North-West"),
    ("CE-05", "Central"),
)
# The [portal] keys that describe this portal to the project, each default region one market (make demo SHAPE=...).
PORTAL_KEYS = """\
export_page = /reports/daily
export_fields = report_date={day:DD.MM.YYYY}, market={region}
region_values = north=NE-01, south=SE-02, east=SW-03, west=NW-04
record_checks = date={day:DD.MM.YYYY}, market={region}
"""
PAGE_KEY = ("", "")  # what the session's served page is filed under: the page is for no day or market
COOKIE = "portal_session"


def default_day() -> dt.date:
    """What the page's date field holds: yesterday, in UTC."""
    return dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)


def page_html(token: str) -> str:
    options = "".join(f'<option value="{code}">{label}</option>' for code, label in MARKETS)
    return (
        "<!doctype html><html><head><title>Daily report</title>"
        '<script src="https://www.google.com/recaptcha/api.js" async defer></script></head><body>\n'
        '<nav><form action="/search"><input name="q" placeholder="Search"></form></nav>\n'
        "<h1>Daily report</h1>\n"
        '<form method="post" id="daily">\n'
        f'<input type="hidden" name="_token" value="{html.escape(token)}">\n'
        f'<label>Date <input type="text" name="report_date" value="{default_day():%d.%m.%Y}" '
        'placeholder="DD.MM.YYYY"></label>\n'
        f'<label>Market <select name="market">{options}</select></label>\n'
        f'<div class="g-recaptcha" data-sitekey="{SITEKEY}"></div>\n'
        '<button type="submit">Show report</button>\n</form></body></html>\n'
    )


def _error(status: int, reason: str) -> Response:
    return Response(json.dumps({"error": reason}), status=status, mimetype="application/json")


def page(state: SandboxState, request: Request) -> Response:
    token = secrets.token_urlsafe(24)
    cookie = state.open_page(
        request.cookies.get(COOKIE), *PAGE_KEY, request.url, action=PATH, expect={"_token": token}, sitekey=SITEKEY
    )
    response = Response(page_html(token), mimetype="text/html")
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="Lax")
    return response


def post(state: SandboxState, request: Request) -> Response:
    form = request.form
    written = form.get("report_date", "").strip()
    try:
        day = dt.datetime.strptime(written, "%d.%m.%Y").date() if written else default_day()
    except ValueError:
        return _error(400, "bad-date")
    market = form.get("market") or MARKETS[0][0]  # no market posted: the select's first
    if market not in dict(MARKETS):
        return _error(400, "bad-market")
    reason = state.verify(request.cookies.get(COOKIE), *PAGE_KEY, form.get("g-recaptcha-response", ""), form, PATH)
    if reason:
        return _error(403, reason)
    records = report_records(day, market, state.cfg.records_per_region)
    return Response(json.dumps({"records": records}, ensure_ascii=False), mimetype="application/json")
