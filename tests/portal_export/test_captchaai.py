"""The CaptchaAI client against a mocked in.php / res.php, on a fake clock (nothing sleeps for real).

Every test asserts on the requests actually sent (`rsps.calls`), on the class raised and on its `.code`.
"""

import json
import traceback
from urllib.parse import parse_qs

import pytest
import requests
import responses
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from portal_export.captchaai import SUBMIT_RESENDS, CaptchaAI, Solve
from portal_export.errors import BusyThreads, KeyLevelError, PermanentError, TransientError, UnsolvableError

API = "https://ocr.test"
KEY = "k3y-0123456789abcdef0123456789ab"  # written on no line that a traceback could quote
PARAMS = {"googlekey": "6Le-sitekey", "pageurl": "https://portal.test/export?day=2026-09-01&region=north"}


# ---------------------------------------------------------------------------------------------- helpers


class FakeClock:
    """time.monotonic and time.sleep in one: sleeping only moves the clock."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def ok(value):
    return {"status": 1, "request": value}


def err(code):
    return {"status": 0, "request": code}


NOT_READY = err("CAPCHA_NOT_READY")


def html(status):
    return status, {"Content-Type": "text/html"}, f"<html><body><h1>{status} Bad Gateway</h1><hr>nginx</body></html>"


def network_error():
    # what requests would say: the message quotes the URL (and here, to be sure, the key)
    return requests.ConnectionError(
        f"HTTPSConnectionPool(host='ocr.test'): Max retries exceeded with url: "
        f"/in.php?key={KEY}&json=1 (Caused by NewConnectionError)"
    )


def refused_before_sent():
    """What requests raises when nothing listens: the connection failed, no byte of the request left."""
    return requests.ConnectionError(MaxRetryError(None, "/in.php", NewConnectionError(None, "Connection refused")))


def reset_after_sent():
    """The connection dropped once the request had left: the service may have created a task."""
    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))


def render(answer):
    """An answer spec as a responses callback result: dict -> JSON, str -> text/plain, tuple as is."""
    if isinstance(answer, BaseException):
        return answer
    if isinstance(answer, dict):
        return 200, {"Content-Type": "application/json"}, json.dumps(answer)
    if isinstance(answer, str):
        return 200, {"Content-Type": "text/plain"}, answer
    return answer


def fields(call):
    return {k: v[0] for k, v in parse_qs(call.request.body).items()}


def kind(call_or_request):
    """in.php, or the res.php action (get, threadsinfo, reportbad)."""
    request = getattr(call_or_request, "request", call_or_request)
    endpoint = request.url.rsplit("/", 1)[1]
    return endpoint if endpoint == "in.php" else parse_qs(request.body)["action"][0]


class Api:
    """CaptchaAI's protocol, scripted per request kind; notes the fake time each request is sent at."""

    def __init__(self, rsps, clock):
        self.rsps = rsps
        self.clock = clock
        self.scripts = {"in.php": [], "get": [], "threadsinfo": [], "reportbad": []}
        self.latency = {}  # kind -> fake seconds one request takes
        self.sent_at = []
        for endpoint in ("in.php", "res.php"):
            rsps.add_callback(responses.POST, f"{API}/{endpoint}", callback=self._answer)

    def on(self, what, *answers):
        self.scripts[what].extend(answers)
        return self

    def _answer(self, request):
        what = kind(request)
        self.sent_at.append(self.clock.now)
        self.clock.now += self.latency.get(what, 0.0)
        assert self.scripts[what], f"unscripted {what} request"
        return render(self.scripts[what].pop(0))

    def sequence(self):
        return [kind(c) for c in self.rsps.calls]

    def poll_times(self):
        return [t for t, c in zip(self.sent_at, self.rsps.calls, strict=True) if kind(c) == "get"]


def make_client(clock, **kw):
    opts = {"timeout_s": 120, "first_poll_s": 15, "poll_every_s": 5, "http_timeout_s": 7.5, **kw}
    return CaptchaAI(KEY, API, clock=clock, sleep=clock.sleep, **opts)


def assert_keyless(error):
    """The key is in no message, repr or formatted traceback, and no chained exception can carry it."""
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    text = "".join(traceback.format_exception(error))
    for shown in (str(error), repr(error), text):
        assert KEY not in shown


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def rsps():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@pytest.fixture
def api(rsps, clock):
    return Api(rsps, clock)


@pytest.fixture
def client(clock):
    return make_client(clock)


# ------------------------------------------------------------------------------ classification on submit

KEY_LEVEL = ["ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "IP_BANNED"]
PERMANENT = [
    "ERROR_PAGEURL",
    "ERROR_GOOGLEKEY",
    "ERROR_WRONG_GOOGLEKEY",
    "ERROR_BAD_TOKEN_OR_PAGEURL",
    "ERROR_BAD_PARAMETERS",
    "ERROR_WRONG_CAPTCHA_ID",
    "ERROR_WRONG_ID_FORMAT",
    "ERROR_BAD_PROXY",
    "ERROR_SOMETHING_NEW",
]
TRANSIENT = ["ERROR_SERVER_ERROR", "ERROR_INTERNAL_SERVER_ERROR", "ERROR_PROXY_CONNECTION_FAILED"]

CODE_TABLE = (
    [(c, KeyLevelError) for c in KEY_LEVEL]
    + [(c, PermanentError) for c in PERMANENT]
    + [(c, TransientError) for c in TRANSIENT]
    + [("ERROR_CAPTCHA_UNSOLVABLE", UnsolvableError)]
)


RESENT = {"ERROR_SERVER_ERROR", "ERROR_INTERNAL_SERVER_ERROR"}  # the service says it failed on its side


@pytest.mark.parametrize("code, cls", [(c, cls) for c, cls in CODE_TABLE if c not in RESENT])
def test_submit_error_code_raises_its_class_after_one_request(api, client, code, cls):
    api.on("in.php", err(code))
    with pytest.raises(Exception) as info:
        client.submit(PARAMS)
    assert type(info.value) is cls  # exact: a PermanentError row must not be a KeyLevelError
    assert info.value.code == code
    assert api.sequence() == ["in.php"]
    assert_keyless(info.value)


@pytest.mark.parametrize(
    "answer, code",
    [
        (network_error(), "NETWORK_ERROR"),
        (reset_after_sent(), "NETWORK_ERROR"),
        ((200, {"Content-Type": "text/html"}, "<html>maintenance</html>"), "UNRECOGNIZED_ANSWER"),
        ({"status": 0}, "UNRECOGNIZED_ANSWER"),
    ],
    ids=["network", "reset-after-sent", "unrecognizable-text", "unrecognizable-json"],
)
def test_submit_transient_answers_that_may_have_made_a_task_cost_the_attempt(api, client, answer, code):
    api.on("in.php", answer)
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert type(info.value) is TransientError
    assert info.value.code == code
    assert api.sequence() == ["in.php"]  # not sent again: the first may have created a task
    assert client.resent == []
    assert_keyless(info.value)


@pytest.mark.parametrize(
    "answer, code",
    [
        (html(500), "HTTP_500"),
        (html(502), "HTTP_502"),
        (html(503), "HTTP_503"),
        (err("ERROR_SERVER_ERROR"), "ERROR_SERVER_ERROR"),
        ("ERROR_SERVER_ERROR", "ERROR_SERVER_ERROR"),
        (err("ERROR_INTERNAL_SERVER_ERROR"), "ERROR_INTERNAL_SERVER_ERROR"),
        (refused_before_sent(), "NETWORK_ERROR"),
        (requests.ConnectTimeout("connect timed out"), "NETWORK_ERROR"),
    ],
    ids=[
        "html-500",
        "html-502",
        "html-503",
        "server-error",
        "server-error-text",
        "internal",
        "refused",
        "connect-timeout",
    ],
)
def test_a_submit_the_service_failed_explicitly_is_sent_again_at_once(api, client, clock, answer, code):
    api.on("in.php", answer, ok("77"))
    assert client.submit(PARAMS) == "77"
    assert api.sequence() == ["in.php", "in.php"]
    first, second = api.rsps.calls
    assert fields(first) == fields(second)
    assert clock.sleeps == []  # at once: no backoff
    assert client.resent == [code]


def test_submit_resends_are_bounded_then_the_attempt_fails_with_the_last_code(api, client, clock):
    api.on("in.php", html(502), err("ERROR_SERVER_ERROR"), html(500), ok("never asked"))
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert info.value.code == "HTTP_500"
    assert api.sequence() == ["in.php"] * (1 + SUBMIT_RESENDS)
    assert client.resent == ["HTTP_502", "ERROR_SERVER_ERROR"]
    assert clock.sleeps == []
    assert_keyless(info.value)


@pytest.mark.parametrize("code, cls", [(c, cls) for c, cls in CODE_TABLE if cls is not TransientError])
def test_poll_error_code_stops_polling_with_its_class(api, client, code, cls):
    api.on("in.php", ok("42")).on("get", NOT_READY, err(code))
    with pytest.raises(Exception) as info:
        client.solve(PARAMS)
    assert type(info.value) is cls
    assert info.value.code == code
    assert api.sequence() == ["in.php", "get", "get"]
    assert_keyless(info.value)


def test_submit_sends_recaptcha_v2_fields(api, client):
    api.on("in.php", ok("42"))
    assert client.submit(PARAMS) == "42"
    (call,) = api.rsps.calls
    assert call.request.method == "POST"
    assert call.request.url == f"{API}/in.php"
    assert fields(call) == {"key": KEY, "json": "1", "method": "userrecaptcha", **PARAMS}


# ------------------------------------------------------------------------------------ ERROR_ZERO_BALANCE


def test_zero_balance_with_every_thread_busy_is_transient(api, client):
    api.on("in.php", err("ERROR_ZERO_BALANCE")).on("threadsinfo", {"threads": "5", "working_threads": 5})
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert type(info.value) is BusyThreads  # transient, and waited out by a client with a gate
    assert info.value.code == "ERROR_ZERO_BALANCE"
    assert api.sequence() == ["in.php", "threadsinfo"]


def test_zero_balance_then_free_thread_resubmits_once_and_gets_a_task(api, client):
    # the race: threads freed up between the refusal and threadsinfo. Not "no active plan".
    api.on("in.php", err("ERROR_ZERO_BALANCE"), ok(777)).on("threadsinfo", {"threads": "5", "working_threads": 4})
    assert client.submit(PARAMS) == "777"
    assert api.sequence() == ["in.php", "threadsinfo", "in.php"]
    first, _, second = api.rsps.calls
    assert fields(first) == fields(second)  # the same task, submitted again


def test_zero_balance_twice_with_a_free_thread_means_no_active_plan(api, client):
    api.on("in.php", err("ERROR_ZERO_BALANCE"), err("ERROR_ZERO_BALANCE"))
    api.on("threadsinfo", {"threads": "5", "working_threads": 0}, {"threads": "5", "working_threads": 0})
    with pytest.raises(KeyLevelError) as info:
        client.submit(PARAMS)
    assert info.value.code == "ERROR_ZERO_BALANCE"
    assert "no active plan" in str(info.value)
    assert api.sequence() == ["in.php", "threadsinfo", "in.php", "threadsinfo"]


def test_zero_balance_twice_then_all_busy_is_transient(api, client):
    api.on("in.php", err("ERROR_ZERO_BALANCE"), err("ERROR_ZERO_BALANCE"))
    api.on("threadsinfo", {"threads": "5", "working_threads": 2}, {"threads": "5", "working_threads": 5})
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert type(info.value) is BusyThreads  # transient, and waited out by a client with a gate
    assert info.value.code == "ERROR_ZERO_BALANCE"
    assert api.sequence() == ["in.php", "threadsinfo", "in.php", "threadsinfo"]


# ---------------------------------------------------------------------------------------- normalization


@pytest.mark.parametrize(
    "answer",
    [ok(123), ok("123"), "OK|123", {"status": "1", "request": "123"}],
    ids=["json-number", "json-string", "plain-text", "status-as-string"],
)
def test_task_id_is_a_string_whatever_its_shape(api, client, answer):
    api.on("in.php", answer)
    task_id = client.submit(PARAMS)
    assert task_id == "123" and type(task_id) is str


def test_plain_text_error_code_despite_json_1(api, client):
    api.on("in.php", "ERROR_WRONG_USER_KEY")
    with pytest.raises(KeyLevelError) as info:
        client.submit(PARAMS)
    assert info.value.code == "ERROR_WRONG_USER_KEY"
    assert fields(api.rsps.calls[0])["json"] == "1"


def test_plain_text_token_and_not_ready(api, client):
    api.on("in.php", "OK|9").on("get", "CAPCHA_NOT_READY", "OK|tok-plain")
    assert client.solve(PARAMS).token == "tok-plain"
    assert api.sequence() == ["in.php", "get", "get"]


def test_html_502_page_is_code_http_502(api, client):
    api.on("in.php", *[html(502)] * (1 + SUBMIT_RESENDS))
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert info.value.code == "HTTP_502"
    assert "nginx" not in str(info.value)  # no response body in messages


# ---------------------------------------------------------------------------------------------- polling


def test_solve_polls_on_a_fixed_grid_and_returns_token_task_and_seconds(api, client, clock):
    api.on("in.php", ok("42")).on("get", NOT_READY, "CAPCHA_NOT_READY", NOT_READY, ok("tok-42"))
    result = client.solve(PARAMS)
    assert isinstance(result, Solve)
    assert tuple(result) == ("tok-42", "42", 30.0)
    assert api.poll_times() == [15.0, 20.0, 25.0, 30.0]
    assert clock.sleeps == [15.0, 5.0, 5.0, 5.0]
    assert [fields(c) for c in api.rsps.calls[1:]] == [{"key": KEY, "json": "1", "action": "get", "id": "42"}] * 4


def test_the_first_poll_counts_from_the_submits_answer_not_after_the_marks_write(api, clock, tmp_path):
    """The in-flight mark takes its task id between the submit and the first poll (a PUT on an object store): that
    write waits inside the first poll's wait, never before it."""
    from portal_export.inflight import InFlight
    from portal_export.store import LocalStore

    class SlowStore(LocalStore):
        def write(self, key, data):
            if data:  # the task id's write, not the mark's creation
                clock.now += 0.8
            super().write(key, data)

    store = SlowStore(tmp_path)
    client = make_client(clock, inflight=InFlight(store))
    api.on("in.php", ok("42")).on("get", ok("tok-42"))
    assert client.solve(PARAMS).task_id == "42"
    assert api.poll_times() == [15.0] and clock.sleeps == [pytest.approx(14.2)]


def test_grid_does_not_drift_with_request_latency(api, client, clock):
    api.latency = {"in.php": 1.0, "get": 1.0}
    api.on("in.php", ok("42")).on("get", NOT_READY, NOT_READY, ok("tok"))
    token, task_id, seconds = client.solve(PARAMS)
    # polling starts at 1 (after the submit): first poll 15 s later, then every 5 s, whatever each poll takes
    assert api.poll_times() == [16.0, 21.0, 26.0]
    assert (token, task_id, seconds) == ("tok", "42", 27.0)


def test_on_submit_and_on_poll_hooks(api, client):
    api.on("in.php", ok("42")).on("get", NOT_READY, ok("tok"))
    submitted, polls = [], []
    client.solve(PARAMS, on_submit=submitted.append, on_poll=lambda *a: polls.append(a))
    assert submitted == ["42"]
    assert polls == [("42", 1, 15.0)]  # the poll that brings the token reports nothing: the post comes first


def test_transient_answers_while_polling_keep_polling_the_same_task(api, client):
    api.on("in.php", ok("42"))
    api.on(
        "get", html(502), err("ERROR_SERVER_ERROR"), network_error(), html(500), "garbage answer", NOT_READY, ok("tok")
    )
    assert client.solve(PARAMS).token == "tok"
    assert api.sequence() == ["in.php"] + ["get"] * 7  # no second in.php
    assert {fields(c)["id"] for c in api.rsps.calls[1:]} == {"42"}
    assert api.poll_times() == [15.0 + 5 * i for i in range(7)]


def test_poll_deadline_is_transient_and_no_poll_goes_past_it(api, clock):
    client = make_client(clock, timeout_s=30)
    api.on("in.php", ok("42")).on("get", *[NOT_READY] * 10)
    with pytest.raises(TransientError) as info:
        client.solve(PARAMS)
    assert type(info.value) is TransientError
    assert info.value.code == "POLL_DEADLINE"
    assert api.poll_times() == [15.0, 20.0, 25.0, 30.0]
    assert api.sequence() == ["in.php"] + ["get"] * 4


def test_deadline_runs_from_submit(api, clock):
    client = make_client(clock, timeout_s=30)
    api.latency = {"in.php": 10.0}  # a slow submit eats into the solve's time
    api.on("in.php", ok("42")).on("get", *[NOT_READY] * 10)
    with pytest.raises(TransientError) as info:
        client.solve(PARAMS)
    assert info.value.code == "POLL_DEADLINE"
    assert api.poll_times() == [25.0, 30.0]  # not 35 and 40: timeout_s bounds the whole solve


def test_deadline_with_transient_answers_until_the_end(api, clock):
    client = make_client(clock, timeout_s=25)
    api.on("in.php", ok("42")).on("get", network_error(), html(502), err("ERROR_SERVER_ERROR"))
    with pytest.raises(TransientError) as info:
        client.solve(PARAMS)
    assert info.value.code == "POLL_DEADLINE"
    assert api.sequence() == ["in.php", "get", "get", "get"]
    assert_keyless(info.value)


# ---------------------------------------------------------------------------------- threads, reportbad


def test_threads_returns_ints(api, client):
    api.on("threadsinfo", {"threads": "5", "working_threads": 3})
    threads = client.threads()
    assert threads == (5, 3) and all(type(n) is int for n in threads)
    assert fields(api.rsps.calls[0]) == {"key": KEY, "json": "1", "action": "threadsinfo"}


def test_threads_without_fields_is_transient(api, client):
    api.on("threadsinfo", {"foo": 1})
    with pytest.raises(TransientError) as info:
        client.threads()
    assert info.value.code == "UNRECOGNIZED_ANSWER"
    assert_keyless(info.value)


def test_report_bad_posts_reportbad_for_the_task(api, client):
    api.on("reportbad", ok("OK_REPORT_RECORDED"), err("ERROR_WRONG_CAPTCHA_ID"))
    assert client.report_bad("42") is True
    assert client.report_bad("43") is False  # best effort: answered, not raised
    assert [fields(c) for c in api.rsps.calls] == [
        {"key": KEY, "json": "1", "action": "reportbad", "id": "42"},
        {"key": KEY, "json": "1", "action": "reportbad", "id": "43"},
    ]


# ------------------------------------------------------------------------------------------- the key


def test_key_only_in_post_bodies_and_every_request_has_a_timeout(api, client):
    api.on("in.php", err("ERROR_ZERO_BALANCE"), ok("42")).on("threadsinfo", {"threads": "5", "working_threads": 1})
    api.on("get", NOT_READY, ok("tok")).on("reportbad", ok("OK_REPORT_RECORDED"))
    client.solve(PARAMS)
    client.report_bad("42")
    assert api.sequence() == ["in.php", "threadsinfo", "in.php", "get", "get", "reportbad"]
    for call in api.rsps.calls:
        assert call.request.method == "POST"
        assert "?" not in call.request.url and KEY not in call.request.url
        assert fields(call)["key"] == KEY
        assert all(KEY not in str(v) for v in call.request.headers.values())
        assert call.request.req_kwargs["timeout"] == 7.5


def test_network_error_on_submit_leaks_no_key(api, client):
    api.on("in.php", network_error())
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert info.value.code == "NETWORK_ERROR"
    assert_keyless(info.value)


def test_network_error_on_threadsinfo_leaks_no_key(api, client):
    api.on("in.php", err("ERROR_ZERO_BALANCE")).on("threadsinfo", network_error())
    with pytest.raises(TransientError) as info:
        client.submit(PARAMS)
    assert info.value.code == "NETWORK_ERROR"
    assert api.sequence() == ["in.php", "threadsinfo"]
    assert_keyless(info.value)


def test_network_error_on_reportbad_is_not_raised(api, client):
    api.on("reportbad", network_error())
    assert client.report_bad("42") is False


def test_no_key_in_client_repr_or_missing_key_error():
    assert KEY not in repr(make_client(FakeClock()))
    with pytest.raises(KeyLevelError) as info:
        CaptchaAI("", API)
    assert info.value.code == "NO_API_KEY"
