"""WSGI app for the partner portal: an export form behind reCAPTCHA v2, in every variant real
portals serve (SandboxConfig.variants, per region; none by default: the simplest portal).

The portal verifies tokens against the shared state, the way a real site asks
Google's siteverify about tokens Google issued, and also checks the widget kind the
token was solved for, the form's action, its CSRF token and view state.
"""

from __future__ import annotations

import json
import secrets
from urllib.parse import urlencode

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from . import daily_report
from . import portal_pages as pages
from .big_answers import BigAnswer
from .config import RATE_LIMIT_KINDS
from .faults import ResetConnection, html_error
from .portal_data import REGION_NAME, csv_body, expected_csv_records, expected_records, parse_day, sitekey_for
from .state import SandboxState

COOKIE = "portal_session"
_URLS = Map(
    [
        Rule("/export", endpoint="export", methods=["GET", "POST"]),
        Rule("/export/form", endpoint="frame", methods=["GET"]),
        Rule("/export/run", endpoint="run", methods=["GET"]),
        Rule("/reports/run", endpoint="run", methods=["POST"]),
        Rule("/login", endpoint="login", methods=["GET", "POST"]),
        Rule("/welcome", endpoint="welcome", methods=["GET"]),
        Rule(daily_report.PATH, endpoint="daily", methods=["GET", "POST"]),
    ]
)
# the endpoints of each shape of portal: the other shape's answer 404
_SHAPE_OF = {"export": "simple", "frame": "simple", "run": "simple", "daily": "daily-report"}


def _error(status: int, reason: str) -> Response:
    return Response(json.dumps({"error": reason}), status=status, mimetype="application/json")


def _html(body: str, status: int = 200) -> Response:
    return Response(body, status=status, mimetype="text/html")


class PortalApp:
    def __init__(self, state: SandboxState):
        self.state = state

    def __call__(self, environ, start_response):
        request = Request(environ)
        try:
            endpoint, _ = _URLS.bind_to_environ(environ).match()
        except HTTPException as exc:
            return exc(environ, start_response)
        if _SHAPE_OF.get(endpoint, self.state.cfg.shape) != self.state.cfg.shape:
            return Response("not found", status=404, mimetype="text/plain")(environ, start_response)
        if endpoint in ("login", "welcome"):  # no faults: they would shift the export's fault schedules
            self.state.note_request("portal_login")
            return self._login(request)(environ, start_response)
        posting = request.method == "POST" or endpoint == "run"
        kind_of = "portal_post" if posting else "portal_get"
        self.state.note_request(kind_of)
        who = f"{request.full_path}|{request.cookies.get(COOKIE, '')}"  # "the same request", sent again
        self.state.note_again(kind_of, who)
        kind, plan = self.state.pick_fault(kind_of)
        if kind in RATE_LIMIT_KINDS:
            return self.state.rate_limit(kind_of, who, kind, plan)(environ, start_response)
        if kind == "reset":
            raise ResetConnection()
        if kind == "slow":  # delayed, then handled normally (a POST still spends its token)
            self.state.sleep(self.state.scaled(plan.slow_s))
        elif kind:  # html502, or html500 for every other kind (no JSON codes on a web page)
            return html_error(502 if kind == "html502" else 500)(environ, start_response)
        if endpoint == "daily":
            handler = daily_report.post if posting else daily_report.page
            return handler(self.state, request)(environ, start_response)
        handler = self._post if posting else self._page
        return handler(request, framed=endpoint == "frame")(environ, start_response)

    # ── pages ────────────────────────────────────────────────────────────────
    def _page(self, request: Request, framed: bool = False) -> Response:
        day, region = request.args.get("day", ""), request.args.get("region", "")
        if not REGION_NAME.fullmatch(region):
            return Response("unknown region", status=404, mimetype="text/plain")
        try:
            day = parse_day(day).isoformat()
        except ValueError:
            return Response("bad day, expected YYYY-MM-DD", status=400, mimetype="text/plain")
        variants = self.state.cfg.variants_of(region)
        cookie = request.cookies.get(COOKIE)
        if "login" in variants and not self.state.logged_in(cookie):
            return redirect("/login?" + urlencode({"next": request.full_path}), 302)
        if "frame" in variants and not framed:
            cookie, _ = self.state.session(cookie)
            response = _html(pages.frame_page(day, region))
        else:
            response, cookie = self._form_page(request, cookie, day, region, variants)
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="Lax")
        return response

    def _form_page(self, request, cookie, day, region, variants) -> tuple[Response, str]:
        hidden: dict = {}
        if "csrf" in variants:
            hidden["csrf_token"] = secrets.token_urlsafe(32)
        if "action" in variants:
            hidden.update(pages.view_state())
        data_s = None
        if "data-s" in variants and not {"anchor", "render"} & variants:
            data_s = secrets.token_urlsafe(60)
        expect = dict(hidden)
        if "action" in variants:
            expect.update(pages.ACTION_FIELDS)
        action = "/reports/run" if "action" in variants else ("/export/run" if "get" in variants else "/export")
        # the page URL is the full URL of this GET (the frame's, when framed): the token must be solved for it
        cookie = self.state.open_page(
            cookie,
            day,
            region,
            request.url,
            action=action,
            invisible="invisible" in variants,
            enterprise="enterprise" in variants,
            data_s=data_s,
            expect=expect,
        )
        body = pages.export_form(day, region, variants, sitekey_for(region), hidden, data_s)
        return _html(body), cookie

    # ── the form post ────────────────────────────────────────────────────────
    def _post(self, request: Request, framed: bool = False) -> Response:
        form = request.args if request.method == "GET" else request.form
        day, region = form.get("day", ""), form.get("region", "")
        try:
            day = parse_day(day).isoformat()
        except ValueError:
            return _error(400, "bad-day")
        if not REGION_NAME.fullmatch(region):
            return _error(400, "bad-region")
        variants = self.state.cfg.variants_of(region)
        if "maintenance" in variants and self.state.maintenance_due(day, region):
            return _html(pages.MAINTENANCE)  # a 200, the token not looked at
        reason = self.state.verify(
            request.cookies.get(COOKIE), day, region, form.get("g-recaptcha-response", ""), form, request.path
        )
        if reason:
            return _error(403, reason)
        cfg = self.state.cfg
        if cfg.answer_bytes.get(region):
            big = BigAnswer(day, region, cfg.answer_bytes[region], as_csv="csv" in variants)
            return Response(big.chunks(), content_type=big.content_type, direct_passthrough=True)
        if {"csv", "csv-attachment"} & variants:
            body = csv_body(expected_csv_records(day, region, cfg.records_per_region))
            if "csv" in variants:
                return Response(body.encode(), content_type="text/csv; charset=utf-8")
            return Response(
                body.encode(),
                content_type="application/octet-stream",
                headers={"Content-Disposition": f'attachment; filename="export_{day}_{region}.csv"'},
            )
        records = expected_records(day, region, cfg.records_per_region)
        # ensure_ascii=False keeps non-ASCII text as UTF-8, as a real JSON API would
        body = json.dumps(records if "list" in variants else {"records": records}, ensure_ascii=False)
        return Response(body, mimetype="application/json")

    # ── login ────────────────────────────────────────────────────────────────
    def _login(self, request: Request) -> Response:
        cookie = request.cookies.get(COOKIE)
        if request.path == "/welcome":
            return _html(pages.WELCOME)
        if request.method == "POST":
            form = request.form
            reason = self.state.log_in(
                cookie,
                form.get("authenticity_token", ""),
                form.get("session[email]", ""),
                form.get("session[password]", ""),
            )
            if reason is None:
                return redirect(form.get("next") or "/welcome", 303)
            if reason == "csrf":
                return _html("<html><head><title>Forbidden</title></head><body>Invalid token</body></html>", 403)
        cookie, csrf = self.state.login_form(cookie)
        response = _html(pages.login_page(csrf, failed=request.method == "POST"))
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="Lax")
        return response
