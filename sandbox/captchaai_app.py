"""WSGI app speaking CaptchaAI's in.php / res.php protocol, plus /_sandbox/* read-outs."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from .config import ANSWER_CODE, RATE_LIMIT_KINDS
from .faults import ResetConnection, html_error
from .portal_data import region_of_sitekey
from .state import NOT_READY, SandboxState

_URLS = Map(
    [
        Rule("/in.php", endpoint="in.php"),
        Rule("/res.php", endpoint="res.php"),
        Rule("/_sandbox/stats", endpoint="stats", methods=["GET"]),
        Rule("/_sandbox/tasks", endpoint="tasks", methods=["GET"]),
    ]
)


def _json(obj) -> Response:
    return Response(json.dumps(obj), mimetype="application/json")


def _valid_pageurl(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


class CaptchaAIApp:
    def __init__(self, state: SandboxState):
        self.state = state

    def __call__(self, environ, start_response):
        request = Request(environ)
        try:
            endpoint, _ = _URLS.bind_to_environ(environ).match()
        except HTTPException as exc:
            return exc(environ, start_response)
        if endpoint == "stats":
            response = _json(self.state.snapshot_stats())
        elif endpoint == "tasks":
            response = _json(self.state.task_list())
        else:
            response = self._api(endpoint, request)
        return response(environ, start_response)

    def _api(self, endpoint: str, request: Request) -> Response:
        st, params = self.state, request.values  # query string and form body alike
        as_json = params.get("json") == "1"
        action = params.get("action") if endpoint == "res.php" else None
        st.note_request(endpoint, key_in_query="key" in request.args, action=action)
        who = params.get("id") or params.get("pageurl") or action or ""  # "the same request", sent again
        st.note_again(endpoint, who)

        kind, plan = st.pick_fault(endpoint, action)
        if kind in RATE_LIMIT_KINDS:
            return st.rate_limit(endpoint, who, kind, plan)
        if kind and ANSWER_CODE.fullmatch(kind):
            return self._reply(endpoint, as_json, False, kind)
        if kind == "reset":
            raise ResetConnection()
        if kind == "slow":  # then the normal answer: a client with a shorter timeout gives up
            st.sleep(st.scaled(plan.slow_s))
        elif kind in ("html500", "html502"):
            return html_error(int(kind[4:]))
        elif kind == "plaintext":
            # the json=1 flag ignored: a bare code; for polls the common case, not-ready
            return Response(NOT_READY if action == "get" else "ERROR_SERVER_ERROR", mimetype="text/plain")
        elif kind in ("server_error", "internal_error"):
            code = "ERROR_SERVER_ERROR" if kind == "server_error" else "ERROR_INTERNAL_SERVER_ERROR"
            return self._reply(endpoint, as_json, False, code)

        key = params.get("key")
        code = st.gate(request.remote_addr, key)
        if code:
            return self._reply(endpoint, as_json, False, code)
        if endpoint == "in.php":
            ok, value = self._submit(key, params)
            return self._reply(endpoint, as_json, ok, value, ok_prefix=True)
        if action == "threadsinfo":  # the real service answers these fields bare, json=1 or not
            threads = st.cfg.threads
            return _json({"threads": str(threads), "working_threads": st.working_threads(key)})
        if action == "getbalance":
            return self._reply(endpoint, as_json, True, f"{st.cfg.balance:.3f}")
        ok, value = self._res(key, action, params.get("id", ""))
        return self._reply(endpoint, as_json, ok, value, ok_prefix=action == "get")

    def _submit(self, key: str, params) -> tuple[bool, str]:
        if params.get("method") != "userrecaptcha":
            return False, "ERROR_BAD_PARAMETERS"
        googlekey = params.get("googlekey", "").strip()
        if not googlekey:
            return False, "ERROR_GOOGLEKEY"
        pageurl = params.get("pageurl", "").strip()
        if not _valid_pageurl(pageurl):
            return False, "ERROR_PAGEURL"
        if region_of_sitekey(googlekey) is None:  # not a key the portal ever showed
            return False, "ERROR_WRONG_GOOGLEKEY"
        # reCAPTCHA v2 kinds, as CaptchaAI takes them: the portal refuses a token solved for another kind
        return self.state.submit(
            key,
            googlekey,
            pageurl,
            invisible=params.get("invisible") == "1",
            enterprise=params.get("enterprise") == "1",
            data_s=params.get("data-s"),
        )

    def _res(self, key: str, action, task_id: str) -> tuple[bool, str]:
        if not action:
            return False, "ERROR_EMPTY_ACTION"
        if action not in ("get", "reportbad", "reportgood"):
            return False, "ERROR_BAD_PARAMETERS"
        if not (task_id.isascii() and task_id.isdigit()):
            return False, "ERROR_WRONG_ID_FORMAT"
        if action == "get":
            return self.state.result(key, task_id)
        return self.state.report(key, task_id, bad=action == "reportbad")

    def _reply(self, endpoint, as_json: bool, ok: bool, value: str, ok_prefix: bool = False) -> Response:
        if not ok:
            self.state.note_code(endpoint, value)
        if as_json:
            return _json({"status": int(ok), "request": value})
        return Response(f"OK|{value}" if ok and ok_prefix else value, mimetype="text/plain")
