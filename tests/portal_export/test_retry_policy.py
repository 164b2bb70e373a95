"""portal.export_once and export.export_region against a mocked portal and a mocked CaptchaAI.

The solver is the real CaptchaAI client on a fake clock; export_region gets a recording sleep and an
rng with a fixed uniform, so nothing waits for real and every backoff wait is known.
"""

import itertools
import json
import traceback
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import responses

from portal_export.captchaai import CaptchaAI
from portal_export.errors import KeyLevelError, PermanentError, TokenRefused, TransientError
from portal_export.portal import Delivery, export_once, parse_page, session
from portal_export.retry_policy import export_region

API = "https://ocr.test"
PORTAL = "https://portal.test"
KEY = "k3y-0123456789abcdef0123456789ab"
DAY = "2026-09-01"
SITEKEY = "6Le-portal-sitekey"
FINAL_URL = f"{PORTAL}/export/view?day={DAY}&region=north"
RECORDS = [
    {"z_id": "n-1", "amount": 12.5, "count": 3, "ok": True, "note": None, "tags": ["a", "b"]},
    {"b": 1.0, "a": "1", "nested": {"y": 2, "x": [1, 2.0]}, "flag": False},
]
NOT_READY = {"status": 0, "request": "CAPCHA_NOT_READY"}
UNSOLVABLE = {"status": 0, "request": "ERROR_CAPTCHA_UNSOLVABLE"}


# ---------------------------------------------------------------------------------------------- helpers


def page_html(sitekey=SITEKEY):
    widget = f'<div class="g-recaptcha" data-sitekey="{sitekey}"></div>' if sitekey else ""
    return (
        f'<!doctype html><html><head><title>Export</title></head><body><main><form method="post" action="/export">'
        f'<input type="hidden" name="day" value="{DAY}">{widget}<button>Export</button></form></main></body></html>'
    )


def json_answer(body, status=200):
    return status, {"Content-Type": "application/json"}, json.dumps(body)


def form(call):
    return {k: v[0] for k, v in parse_qs(call.request.body).items()}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class World:
    """The portal and CaptchaAI, both mocked; answers are scripted, defaults are the happy path.

    Portal: GET /export redirects to /export/view (the page's final URL), which serves the page and
    sets a fresh session cookie per load; POST /export answers the records. CaptchaAI: in.php gives
    task ids 101, 102, ...; res.php answers each task from its script, else a token at once.
    """

    def __init__(self, rsps):
        self.rsps = rsps
        self.pages = []  # answers of GET /export/view, in order; default: the page with a sitekey
        self.posts = []  # answers of POST /export, in order; default: the records
        self.submits = []  # answers of in.php, in order; default: the next task id
        self.polls = {}  # task id -> answers of res.php get; default: its token
        self.page_loads = itertools.count(1)
        self.task_ids = itertools.count(101)
        rsps.add_callback(responses.GET, f"{PORTAL}/export", callback=self._redirect)
        rsps.add_callback(responses.GET, f"{PORTAL}/export/view", callback=self._page)
        rsps.add_callback(responses.POST, f"{PORTAL}/export", callback=self._post)
        rsps.add_callback(responses.POST, f"{API}/in.php", callback=self._submit)
        rsps.add_callback(responses.POST, f"{API}/res.php", callback=self._res)

    def _redirect(self, request):
        return 302, {"Location": f"/export/view?{urlsplit(request.url).query}"}, ""

    def _page(self, request):
        n = next(self.page_loads)
        if self.pages:
            return self.pages.pop(0)
        return 200, {"Content-Type": "text/html", "Set-Cookie": f"portal_sid=s-{n}; Path=/"}, page_html()

    def _post(self, request):
        answer = self.posts.pop(0) if self.posts else RECORDS
        return json_answer({"records": answer}) if isinstance(answer, list) else answer

    def _submit(self, request):
        if self.submits:
            return json_answer(self.submits.pop(0))
        return json_answer({"status": 1, "request": next(self.task_ids)})  # a number, as the live service

    def _res(self, request):
        fields = {k: v[0] for k, v in parse_qs(request.body).items()}
        if fields["action"] == "reportbad":
            return json_answer({"status": 1, "request": "OK_REPORT_RECORDED"})
        script = self.polls.get(fields["id"])
        return json_answer(script.pop(0) if script else {"status": 1, "request": f"tok-{fields['id']}"})

    # what was sent
    def calls(self, method, url):
        return [c for c in self.rsps.calls if c.request.method == method and c.request.url.split("?")[0] == url]

    def page_gets(self):
        return self.calls("GET", f"{PORTAL}/export")

    def form_posts(self):
        return self.calls("POST", f"{PORTAL}/export")

    def submitted(self):
        return [form(c) for c in self.calls("POST", f"{API}/in.php")]

    def posted_tokens(self):
        return [form(c)["g-recaptcha-response"] for c in self.form_posts()]

    def res(self, action):
        return [form(c) for c in self.calls("POST", f"{API}/res.php") if form(c)["action"] == action]


class FixedRng:
    def __init__(self, value):
        self.value = value
        self.calls = []

    def uniform(self, a, b):
        self.calls.append((a, b))
        return self.value


@pytest.fixture
def world():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield World(rsps)


@pytest.fixture
def solver():
    clock = FakeClock()
    return CaptchaAI(KEY, API, timeout_s=60, first_poll_s=15, poll_every_s=5, clock=clock, sleep=clock.sleep)


class Lines:
    """A sink that keeps what the region's target would hold: the records' lines, as objects."""

    def __init__(self):
        self.records = []

    def __call__(self, lines):
        self.records = [json.loads(line) for line in lines]  # an attempt's records replace the last's
        return len(self.records)


def run_region(solver, attempts=4, rng=None, **kw):
    """export_region with recorded waits; returns (outcome or raised error, waits, attempt numbers,
    the records delivered)."""
    waits, seen, lines = [], [], Lines()
    try:
        result = export_region(
            DAY,
            "north",
            PORTAL,
            solver,
            sink=lines,
            attempts=attempts,
            retry_base_s=10,
            retry_jitter_s=10,
            rng=rng or FixedRng(2.5),
            sleep=waits.append,
            on_attempt=seen.append,
            **kw,
        )
    except Exception as exc:  # returned, for the test to assert its class
        result = exc
    return result, waits, seen, lines.records


# ------------------------------------------------------------------------------------------ export_once


def test_export_once_delivers_the_records_exactly(world, solver):
    lines = Lines()
    delivery = export_once(DAY, "north", PORTAL, solver, sink=lines, http_timeout_s=9)
    assert isinstance(delivery, Delivery) and delivery.rows == 2
    assert lines.records == RECORDS
    assert json.dumps(lines.records) == json.dumps(RECORDS)  # key order, 1.0 vs 1, True vs 1, None
    assert (delivery.task_id, delivery.solve_seconds) == ("101", 15.0)

    (get,) = world.page_gets()
    assert parse_qs(urlsplit(get.request.url).query) == {"day": [DAY], "region": ["north"]}
    assert world.submitted() == [
        {"key": KEY, "json": "1", "method": "userrecaptcha", "googlekey": SITEKEY, "pageurl": FINAL_URL}
    ]  # the page's final URL
    (post,) = world.form_posts()
    assert form(post) == {"day": DAY, "region": "north", "g-recaptcha-response": "tok-101"}
    assert "portal_sid=s-1" in post.request.headers["Cookie"]  # the cookie the page set
    for call in world.rsps.calls:
        if call.request.url.startswith(PORTAL):
            assert call.request.req_kwargs["timeout"] == 9
    assert [c.request.url.split("?")[0] for c in world.rsps.calls] == [
        f"{PORTAL}/export",
        f"{PORTAL}/export/view",
        f"{API}/in.php",
        f"{API}/res.php",
        f"{PORTAL}/export",
    ]


def test_empty_records_list_is_an_answer(world, solver):
    world.posts.append([])
    lines = Lines()
    assert export_once(DAY, "north", PORTAL, solver, sink=lines).rows == 0 and lines.records == []


@pytest.mark.parametrize(
    "sitekey_page",
    [page_html(sitekey=None), page_html(sitekey=""), "not html at all"],
    ids=["no-widget", "empty-sitekey", "text"],
)
def test_page_without_sitekey_is_permanent_and_solves_nothing(world, solver, sitekey_page):
    world.pages.append((200, {"Content-Type": "text/html"}, sitekey_page))
    with pytest.raises(PermanentError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is PermanentError
    assert info.value.code == "NO_SITEKEY"
    message = str(info.value)
    assert DAY in message and "north" in message and FINAL_URL in message
    assert world.submitted() == [] and world.form_posts() == []


def test_the_widget_is_found_anywhere_in_the_page():
    widget = parse_page(page_html(), PORTAL).widget
    assert widget is not None and widget.sitekey == SITEKEY
    assert parse_page("<p>no widget</p>", PORTAL).widget is None


def test_a_json_list_of_objects_is_an_answer(world, solver):
    world.posts.append(json_answer(RECORDS))
    lines = Lines()
    export_once(DAY, "north", PORTAL, solver, sink=lines)
    assert json.dumps(lines.records) == json.dumps(RECORDS)


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"Content-Type": "text/html"}, "<html><head><title>Down for maintenance</title></head></html>"),
        (200, {"Content-Type": "text/plain"}, "<!DOCTYPE html><html><title>Sign in</title><body>login</body>"),
    ],
    ids=["maintenance", "login-page-after-expiry"],
)
def test_a_200_html_page_is_transient_with_its_title_and_no_token_reported(world, solver, answer):
    world.posts.append(answer)
    with pytest.raises(TransientError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is TransientError and info.value.code == "PORTAL_HTML_ANSWER"
    assert "'Down for maintenance'" in str(info.value) or "'Sign in'" in str(info.value)
    assert world.res("reportbad") == []


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"Content-Type": "text/plain"}, "Export done"),
        json_answer({"rows": RECORDS}),
        json_answer({"records": "none"}),
        json_answer({"records": [1, 2]}),
        json_answer([1, 2]),
    ],
    ids=["plain-text", "no-records-key", "records-not-a-list", "records-not-objects", "list-not-objects"],
)
def test_answer_without_a_records_list_is_permanent_never_empty(world, solver, answer):
    world.posts.append(answer)
    with pytest.raises(PermanentError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is PermanentError
    assert info.value.code == "PORTAL_BAD_ANSWER"
    assert world.res("reportbad") == []


@pytest.mark.parametrize("status", [500, 502, 503, 408, 429])
def test_portal_5xx_on_the_page_is_transient(world, solver, status, monkeypatch):
    monkeypatch.setattr(session, "RATE_LIMIT_WAIT_S", 0.5)  # a 429 (no Retry-After) past the wait: an error
    world.pages.append((status, {"Content-Type": "text/html"}, "<html>down</html>"))
    with pytest.raises(TransientError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is TransientError
    assert info.value.code == f"PORTAL_HTTP_{status}"
    assert world.submitted() == []


@pytest.mark.parametrize("status", [500, 408, 429])
def test_portal_5xx_on_the_post_is_transient_not_a_refused_token(world, solver, status, monkeypatch):
    monkeypatch.setattr(session, "TOKEN_LIFE_S", 30.5)  # the post waits TOKEN_LIFE_S - http_timeout_s: 0.5 s
    world.posts.append((status, {"Content-Type": "text/html"}, "<html>down</html>"))
    with pytest.raises(TransientError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is TransientError
    assert info.value.code == f"PORTAL_HTTP_{status}"
    assert world.res("reportbad") == []


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_error_on_the_post_posts_the_token_again_once(world, solver, status):
    world.posts.append((status, {"Content-Type": "text/html"}, "<html>bad gateway</html>"))
    lines = Lines()
    export_once(DAY, "north", PORTAL, solver, sink=lines)
    assert lines.records == RECORDS and len(world.submitted()) == 1  # one solve, not two
    assert world.posted_tokens() == ["tok-101", "tok-101"]


def test_a_gateway_error_twice_on_the_post_is_transient(world, solver):
    world.posts.extend([(502, {}, "<html>bad gateway</html>")] * 2)
    with pytest.raises(TransientError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert type(info.value) is TransientError and info.value.code == "PORTAL_HTTP_502"
    assert world.posted_tokens() == ["tok-101", "tok-101"] and world.res("reportbad") == []


def test_a_token_refused_after_a_gateway_error_is_not_reported_bad(world, solver):
    """Our first post may have spent it: the refusal says nothing about CaptchaAI's token."""
    world.posts.extend([(502, {}, "<html>bad gateway</html>"), json_answer({"error": "captcha"}, status=403)])
    with pytest.raises(TokenRefused):
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert world.res("reportbad") == []


def test_portal_4xx_on_the_page_is_permanent(world, solver):
    world.pages.append((404, {"Content-Type": "text/html"}, "<html>no such region</html>"))
    with pytest.raises(PermanentError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert info.value.code == "PORTAL_HTTP_404"
    assert world.submitted() == []


@pytest.mark.parametrize("status", [400, 403, 422])
def test_refused_token_is_reported_bad_and_raises_token_refused(world, solver, status):
    world.posts.append(json_answer({"error": "captcha"}, status=status))
    with pytest.raises(TokenRefused) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert info.value.code == f"PORTAL_HTTP_{status}"
    assert isinstance(info.value, TransientError)
    assert [r["id"] for r in world.res("reportbad")] == ["101"]
    assert "tok-101" not in str(info.value)


@pytest.mark.parametrize("where", ["page", "post"])
def test_portal_network_error_is_transient_and_unchained(world, solver, where):
    boom = requests.ConnectionError(f"Max retries exceeded with url: /export?day={DAY}&region=north")
    if where == "page":
        world.pages.append((200, {}, boom))
    else:
        world.posts.append((200, {}, boom))
    with pytest.raises(TransientError) as info:
        export_once(DAY, "north", PORTAL, solver, sink=Lines())
    assert info.value.code == "PORTAL_NETWORK_ERROR"
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    assert "Max retries" not in "".join(traceback.format_exception(info.value))


# ---------------------------------------------------------------------------------------- export_region


def test_region_ok_at_first_attempt(world, solver):
    out, waits, seen, records = run_region(solver)
    assert (out.status, records, out.task_ids, out.solve_seconds) == ("ok", RECORDS, ["101"], 15.0)
    assert (out.attempts, out.refused_tokens, out.transient_errors, out.idle_slot_seconds) == (1, 0, [], 0.0)
    assert waits == [] and seen == [1]
    assert out.to_dict()["rows"] == 2


@pytest.mark.parametrize("jitter", [2.5, -4.0])
def test_transient_errors_retried_attempts_times_with_backoff_then_raised(world, solver, jitter):
    world.posts.extend([(500, {}, "<html>server error</html>")] * 4)
    rng = FixedRng(jitter)
    err, waits, seen, records = run_region(solver, attempts=4, rng=rng)
    assert type(err) is TransientError
    assert err.code == "PORTAL_HTTP_500"
    assert "4 attempts" in str(err)
    assert waits == [10 + jitter, 30 + jitter, 70 + jitter]  # base x (2^n - 1) +- jitter
    assert set(rng.calls) == {(-10, 10)}  # (tenacity also draws a wait for the last attempt, unused)
    assert seen == [1, 2, 3, 4]
    # every attempt from a fresh page (its own session cookie) and a fresh task
    assert len(world.page_gets()) == 4
    assert [s["pageurl"] for s in world.submitted()] == [FINAL_URL] * 4
    posts = world.form_posts()
    assert [form(p)["g-recaptcha-response"] for p in posts] == ["tok-101", "tok-102", "tok-103", "tok-104"]
    assert [p.request.headers["Cookie"] for p in posts] == [f"portal_sid=s-{n}" for n in range(1, 5)]
    assert err.__cause__ is None and err.__suppress_context__


def test_backoff_never_waits_a_negative_time(world, solver):
    world.pages.extend([(503, {}, "down")] * 2)
    out, waits, _, records = run_region(solver, attempts=3, rng=FixedRng(-10.0))
    assert out.status == "ok"
    assert waits == [0.0, 20.0]


@pytest.mark.parametrize("attempts", [1, 2])
def test_attempts_counts_the_first_one(world, solver, attempts):
    world.pages.extend([(503, {}, "down")] * 4)
    err, waits, seen, records = run_region(solver, attempts=attempts)
    assert isinstance(err, TransientError) and err.code == "PORTAL_HTTP_503"
    assert len(world.page_gets()) == attempts and len(waits) == attempts - 1
    assert f"{attempts} attempts" in str(err)


def test_transient_then_ok_and_idle_slot_seconds_is_the_sum_of_waits(world, solver):
    world.pages.append((503, {}, "down"))
    world.polls["101"] = [NOT_READY] * 20  # poll deadline on the first task
    out, waits, seen, records = run_region(solver)
    assert out.status == "ok"
    assert out.transient_errors == ["PORTAL_HTTP_503", "POLL_DEADLINE"]
    assert out.task_ids == ["101", "102"]  # the timed-out task, then a fresh one
    assert len(world.submitted()) == 2
    assert len(world.page_gets()) == 3 and out.attempts == 3
    assert waits == [12.5, 32.5]
    assert out.idle_slot_seconds == sum(waits) == 45.0
    assert records == RECORDS


@pytest.mark.parametrize(
    "setup, cls, code",
    [
        (lambda w: w.pages.append((200, {}, page_html(sitekey=None))), PermanentError, "NO_SITEKEY"),
        (
            lambda w: w.submits.append({"status": 0, "request": "ERROR_WRONG_USER_KEY"}),
            KeyLevelError,
            "ERROR_WRONG_USER_KEY",
        ),
        (lambda w: w.submits.append({"status": 0, "request": "ERROR_PAGEURL"}), PermanentError, "ERROR_PAGEURL"),
        (lambda w: w.posts.append(json_answer({"rows": []})), PermanentError, "PORTAL_BAD_ANSWER"),
    ],
    ids=["no-sitekey", "key-level", "bad-pageurl", "bad-answer"],
)
def test_permanent_errors_are_not_retried(world, solver, setup, cls, code):
    setup(world)
    err, waits, seen, records = run_region(solver)
    assert type(err) is cls and err.code == code
    assert len(world.page_gets()) == 1 and len(world.submitted()) <= 1
    assert waits == [] and seen == [1]


def test_unsolvable_twice_gives_the_region_up(world, solver):
    world.polls["101"] = [UNSOLVABLE]
    world.polls["102"] = [NOT_READY, UNSOLVABLE]
    out, waits, seen, records = run_region(solver)
    assert out.status == "unsolvable"
    assert out.task_ids == ["101", "102"]
    assert (records, out.solve_seconds, out.attempts) == ([], None, 2)
    assert len(world.page_gets()) == 2 and len(world.submitted()) == 2  # one fresh resubmission
    assert world.form_posts() == []
    assert waits == [] and seen == [1, 2]
    assert out.to_dict()["rows"] == 0


def test_unsolvable_then_solved_is_ok(world, solver):
    world.polls["101"] = [UNSOLVABLE]
    world.polls["102"] = [NOT_READY, {"status": 1, "request": "tok-102"}]
    out, waits, _, records = run_region(solver)
    assert (out.status, out.task_ids, records) == ("ok", ["101", "102"], RECORDS)
    assert out.solve_seconds == 20.0  # of the delivering solve
    assert form(world.form_posts()[0])["g-recaptcha-response"] == "tok-102"
    assert waits == []


def test_refused_token_is_counted_reported_and_retried(world, solver):
    world.posts.append(json_answer({"error": "bad captcha"}, status=403))
    out, waits, seen, records = run_region(solver)
    assert out.status == "ok" and records == RECORDS
    assert out.refused_tokens == 1
    assert out.transient_errors == ["PORTAL_HTTP_403"]
    assert out.task_ids == ["101", "102"]
    assert [r["id"] for r in world.res("reportbad")] == ["101"]
    assert len(world.page_gets()) == 2
    assert waits == [12.5] and out.idle_slot_seconds == 12.5
