"""WSGI app for the partner portal: an export form behind reCAPTCHA v2.

The portal verifies tokens against the shared state, the way a real site asks
Google's siteverify about tokens Google issued.
"""

from __future__ import annotations

import html
import json

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from .faults import ResetConnection, html_error
from .portal_data import REGIONS, expected_records, parse_day, sitekey_for
from .state import SandboxState

COOKIE = "portal_session"
_URLS = Map([Rule("/export", endpoint="export", methods=["GET", "POST"])])

_PAGE = """<!doctype html>
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


def _error(status: int, reason: str) -> Response:
    return Response(json.dumps({"error": reason}), status=status, mimetype="application/json")


class PortalApp:
    def __init__(self, state: SandboxState):
        self.state = state

    def __call__(self, environ, start_response):
        request = Request(environ)
        try:
            _URLS.bind_to_environ(environ).match()
        except HTTPException as exc:
            return exc(environ, start_response)
        endpoint = "portal_get" if request.method == "GET" else "portal_post"
        self.state.note_request(endpoint)
        kind, plan = self.state.pick_fault(endpoint)
        if kind == "reset":
            raise ResetConnection()
        if kind == "slow":  # delayed, then handled normally (a POST still spends its token)
            self.state.sleep(self.state.scaled(plan.slow_s))
        elif kind:  # html502, or html500 for every other kind (no JSON codes on a web page)
            return html_error(502 if kind == "html502" else 500)(environ, start_response)
        handler = self._page if endpoint == "portal_get" else self._post
        return handler(request)(environ, start_response)

    def _page(self, request: Request) -> Response:
        day, region = request.args.get("day", ""), request.args.get("region", "")
        if region not in REGIONS:
            return Response("unknown region", status=404, mimetype="text/plain")
        try:
            day = parse_day(day).isoformat()
        except ValueError:
            return Response("bad day, expected YYYY-MM-DD", status=400, mimetype="text/plain")
        # the page URL is the full URL of this GET: the token must be solved for it
        cookie = self.state.open_page(request.cookies.get(COOKIE), day, region, request.url)
        body = _PAGE.format(day=day, region=html.escape(region), sitekey=sitekey_for(region))
        response = Response(body, mimetype="text/html")
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="Lax")
        return response

    def _post(self, request: Request) -> Response:
        form = request.form
        day, region = form.get("day", ""), form.get("region", "")
        try:
            day = parse_day(day).isoformat()
        except ValueError:
            return _error(400, "bad-day")
        if region not in REGIONS:
            return _error(400, "bad-region")
        reason = self.state.verify(request.cookies.get(COOKIE), day, region, form.get("g-recaptcha-response", ""))
        if reason:
            return _error(403, reason)
        records = expected_records(day, region, self.state.cfg.records_per_region)
        # ensure_ascii=False keeps non-ASCII text as UTF-8, as a real JSON API would
        return Response(json.dumps({"records": records}, ensure_ascii=False), mimetype="application/json")
