"""The sandbox against its own spec, with plain requests (time scaled: 1 sandbox second = 10 ms)."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from sandbox import NO_PLAN_KEY, SANDBOX_KEY, FaultPlan, Sandbox, SandboxConfig, expected_records, sitekey_for
from sandbox.portal_data import region_of_sitekey

SCALE = 0.01
DAY = "2024-03-01"
from tests import ROOT  # noqa: E402
from tests.helpers.speed import scaled  # noqa: E402

OTHER_KEY = "f" * 32  # well-formed, but no such account


@pytest.fixture
def make_sb():
    started = []

    def make(**fields):
        fields.setdefault("time_scale", SCALE)
        sb = Sandbox(SandboxConfig(**fields)).start()
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop()


def call(sb, endpoint, key=SANDBOX_KEY, timeout=5, **fields):
    """POST with the key in the body, json=1; returns the parsed JSON."""
    data = {"json": 1, **fields} if key is None else {"key": key, "json": 1, **fields}
    return requests.post(f"{sb.captchaai_url}/{endpoint}", data=data, timeout=timeout).json()


def submit(sb, region="north", pageurl=None, key=SANDBOX_KEY):
    pageurl = pageurl or f"{sb.portal_url}/export?day={DAY}&region={region}"
    return call(sb, "in.php", key=key, method="userrecaptcha", googlekey=sitekey_for(region), pageurl=pageurl)


def task(sb, task_id):
    return next(t for t in sb.tasks() if t["id"] == task_id)


def wait_ready(sb, task_id):
    """Sleep exactly until the task's solve time has passed (no fixed sleeps)."""
    time.sleep(max(0.0, task(sb, task_id)["ready_t"] - sb.now()) + 0.005)


def wait_until(predicate, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def open_page(session, sb, region="north", day=DAY):
    page = session.get(f"{sb.portal_url}/export", params={"day": day, "region": region}, timeout=5)
    assert page.status_code == 200
    return page.url, re.search(r'class="g-recaptcha" data-sitekey="([^"]+)"', page.text).group(1)


def solved_token(sb, session, region="north", day=DAY, googlekey=None, pageurl=None):
    """Open the export page in `session` and get a token for it the way a client would."""
    page_url, sitekey = open_page(session, sb, region, day)
    answer = call(sb, "in.php", method="userrecaptcha", googlekey=googlekey or sitekey, pageurl=pageurl or page_url)
    assert answer["status"] == 1, answer
    wait_ready(sb, answer["request"])
    result = call(sb, "res.php", action="get", id=answer["request"])
    assert result["status"] == 1, result
    return result["request"]


def post_export(session, sb, token, region="north", day=DAY, **kw):
    return session.post(
        f"{sb.portal_url}/export",
        timeout=kw.pop("timeout", 5),
        data={"day": day, "region": region, "g-recaptcha-response": token},
        **kw,
    )


# ── the happy path ───────────────────────────────────────────────────────────
def test_submit_poll_token_and_portal_accepts(make_sb):
    sb = make_sb(solve_s=20)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sb.captchaai_url) and sb.captchaai_url != sb.portal_url
    s = requests.Session()
    page_url, sitekey = open_page(s, sb, "east")
    assert sitekey == sitekey_for("east") and "portal_session" in s.cookies
    sub = call(sb, "in.php", method="userrecaptcha", googlekey=sitekey, pageurl=page_url)
    assert sub["status"] == 1 and sub["request"].isdigit()
    assert call(sb, "res.php", action="get", id=sub["request"]) == {"status": 0, "request": "CAPCHA_NOT_READY"}
    wait_ready(sb, sub["request"])
    token = call(sb, "res.php", action="get", id=sub["request"])["request"]
    assert len(token) >= 60
    assert call(sb, "res.php", action="get", id=sub["request"])["request"] == token  # stable
    resp = post_export(s, sb, token, "east")
    assert resp.status_code == 200
    expected = expected_records(DAY, "east")
    assert resp.json()["records"] == expected
    assert [list(r) for r in resp.json()["records"]] == [list(r) for r in expected]  # key order kept
    assert json.dumps(expected, ensure_ascii=False) in resp.text  # byte-equal serialisation
    t = task(sb, sub["request"])
    assert t["status"] == "ready" and t["polls"] == 3 and t["pageurl"] == page_url
    assert t["solve_s"] == pytest.approx(20 * SCALE) and t["token_posted_t"] >= t["ready_t"]
    tokens = sb.stats()["tokens"]
    assert tokens["issued"] == 1 and tokens["accepted"] == 1 and tokens["refused"] == {}
    assert tokens["ready_to_post_s"][0] == pytest.approx(t["token_posted_t"] - t["ready_t"], abs=1e-5)


def test_plain_text_answers_without_json(make_sb):
    sb = make_sb(solve_s=20)
    url = sb.captchaai_url
    fields = {
        "key": SANDBOX_KEY,
        "method": "userrecaptcha",
        "googlekey": sitekey_for("west"),
        "pageurl": f"{sb.portal_url}/export?day={DAY}&region=west",
    }
    sub = requests.post(f"{url}/in.php", data=fields, timeout=5).text
    assert re.fullmatch(r"OK\|\d+", sub)
    task_id = sub[3:]
    get = {"key": SANDBOX_KEY, "action": "get", "id": task_id}
    assert requests.post(f"{url}/res.php", data=get, timeout=5).text == "CAPCHA_NOT_READY"
    wait_ready(sb, task_id)
    assert re.fullmatch(r"OK\|\S{60,}", requests.post(f"{url}/res.php", data=get, timeout=5).text)
    assert requests.post(f"{url}/in.php", data={**fields, "googlekey": ""}, timeout=5).text == "ERROR_GOOGLEKEY"
    balance = requests.post(f"{url}/res.php", data={"key": SANDBOX_KEY, "action": "getbalance"}, timeout=5)
    assert balance.text == "12.345"


# ── plan threads ─────────────────────────────────────────────────────────────
def test_threads_held_until_solved_even_unpolled(make_sb):
    sb = make_sb(threads=2, solve_s=30)
    first, second = submit(sb)["request"], submit(sb)["request"]
    assert call(sb, "res.php", action="threadsinfo") == {"threads": "2", "working_threads": 2}
    assert submit(sb) == {"status": 0, "request": "ERROR_ZERO_BALANCE"}
    assert len(sb.tasks()) == 2  # the refused submit created nothing
    wait_ready(sb, second)  # nobody polls: the clock alone frees the threads
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 0
    assert submit(sb)["status"] == 1
    stats = sb.stats()
    assert stats["threads"]["peak"] == 2 and stats["polls"] == {}
    assert [n for _, n in stats["threads"]["timeline"]] == [0, 1, 2, 1, 0, 1]
    assert stats["codes"]["in.php"] == {"ERROR_ZERO_BALANCE": 1}
    assert task(sb, first)["polls"] == 0


def test_a_paused_clock_ends_no_solve_and_resumes_where_it_stood(make_sb):
    sb = make_sb(solve_s=20)  # 0.2 s
    sb.pause_clock()
    t = sb.now()
    task_id = submit(sb)["request"]
    time.sleep(0.25)  # longer than the solve, in real time
    assert sb.now() == t and task(sb, task_id)["ready_t"] == round(t + 0.2, 6)
    assert call(sb, "res.php", action="get", id=task_id)["request"] == "CAPCHA_NOT_READY"
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 1
    before = time.monotonic()
    sb.resume_clock()
    resumed, real = sb.now(), time.monotonic() - before
    assert t <= resumed <= t + real  # on from where it stood: the paused 0.25 s never passed for it
    wait_ready(sb, task_id)
    assert call(sb, "res.php", action="get", id=task_id)["status"] == 1


def test_occupy_threads_as_another_consumer(make_sb):
    sb = make_sb(threads=5, solve_s=30)
    assert sb.occupy_threads(3, 60) == 3
    assert submit(sb)["status"] == 1 and submit(sb)["status"] == 1
    assert sb.occupy_threads(4, 60) == 0  # only free threads can be taken
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 5
    assert submit(sb)["request"] == "ERROR_ZERO_BALANCE"
    wait_until(lambda: call(sb, "res.php", action="threadsinfo")["working_threads"] == 3)
    assert sb.stats()["threads"]["peak"] == 5


def test_release_threads_ends_only_the_other_consumers_holds(make_sb):
    sb = make_sb(threads=5, solve_s=3000)
    assert submit(sb)["status"] == 1
    assert sb.occupy_threads(2, 3000) == 2
    assert sb.release_threads("another key") == 0
    assert sb.release_threads() == 2
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 1  # our task still works
    assert sb.release_threads() == 0
    assert sb.occupy_threads(5, 3000) == 4


def test_release_threads_ends_n_holds_and_leaves_the_others_working(make_sb):
    sb = make_sb(threads=5)
    assert sb.occupy_threads(4, 3000) == 4
    assert sb.release_threads(n=1) == 1
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 3
    assert sb.release_threads(n=2) == 2
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 1
    assert sb.release_threads() == 1


def test_no_plan_key_refuses_submits_with_free_threads(make_sb):
    sb = make_sb()
    assert call(sb, "res.php", key=NO_PLAN_KEY, action="threadsinfo") == {"threads": "5", "working_threads": 0}
    assert submit(sb, key=NO_PLAN_KEY) == {"status": 0, "request": "ERROR_ZERO_BALANCE"}
    sb.configure(no_plan_keys=frozenset({NO_PLAN_KEY, SANDBOX_KEY}))  # the plan expires mid-run
    assert submit(sb)["request"] == "ERROR_ZERO_BALANCE"
    assert sb.tasks() == []


# ── keys and bans ────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    "key, code",
    [
        (None, "ERROR_WRONG_USER_KEY"),
        ("short", "ERROR_WRONG_USER_KEY"),
        ("x" * 33, "ERROR_WRONG_USER_KEY"),
        (OTHER_KEY, "ERROR_KEY_DOES_NOT_EXIST"),
    ],
)
def test_key_errors_on_every_endpoint(make_sb, key, code):
    sb = make_sb()
    assert len(SANDBOX_KEY) == len(NO_PLAN_KEY) == 32
    assert submit(sb, key=key) == {"status": 0, "request": code}
    for action in ("get", "threadsinfo", "getbalance", "reportbad"):
        assert call(sb, "res.php", key=key, action=action, id="1") == {"status": 0, "request": code}
    plain = {"action": "threadsinfo"} if key is None else {"key": key, "action": "threadsinfo"}
    assert requests.post(f"{sb.captchaai_url}/res.php", data=plain, timeout=5).text == code
    assert sb.stats()["bad_key_requests"] == 6


def test_ip_banned_after_bad_keys_then_lifted(make_sb):
    sb = make_sb(ban_after=3, ban_s=30)
    for key in ("short", OTHER_KEY, "x"):
        assert call(sb, "res.php", key=key, action="threadsinfo")["request"].startswith("ERROR_")
    banned_at = sb.now()
    assert submit(sb) == {"status": 0, "request": "IP_BANNED"}  # any key, every endpoint
    assert call(sb, "res.php", action="threadsinfo") == {"status": 0, "request": "IP_BANNED"}
    assert (
        requests.post(f"{sb.captchaai_url}/res.php", timeout=5, data={"key": SANDBOX_KEY, "action": "getbalance"}).text
        == "IP_BANNED"
    )
    assert sb.stats()["ip_bans"] == 1
    time.sleep(max(0.0, banned_at + 30 * SCALE - sb.now()) + 0.01)
    assert submit(sb)["status"] == 1


def test_bad_keys_spread_beyond_ban_window_do_not_ban(make_sb):
    sb = make_sb(ban_after=2, ban_s=5)
    call(sb, "res.php", key="short", action="threadsinfo")
    time.sleep(5 * SCALE + 0.01)
    call(sb, "res.php", key="short", action="threadsinfo")
    assert call(sb, "res.php", action="threadsinfo")["threads"] == "5"


# ── unsolvable tasks and submit errors ───────────────────────────────────────
@pytest.mark.parametrize("marker", ["north", sitekey_for("north")])
def test_unsolvable_by_sitekey(make_sb, marker):
    sb = make_sb(solve_s=40, unsolvable_sitekeys={marker})
    sb.pause_clock()  # however loaded the machine, neither solve ends before the checks below
    bad, good = submit(sb, "north")["request"], submit(sb, "south")["request"]
    assert call(sb, "res.php", action="get", id=bad)["request"] == "CAPCHA_NOT_READY"
    assert call(sb, "res.php", action="threadsinfo")["working_threads"] == 2  # held until its time passed
    sb.resume_clock()
    wait_ready(sb, bad)
    assert call(sb, "res.php", action="get", id=bad) == {"status": 0, "request": "ERROR_CAPTCHA_UNSOLVABLE"}
    assert call(sb, "res.php", action="get", id=good)["status"] == 1
    assert task(sb, bad)["status"] == "unsolvable" and task(sb, good)["status"] == "ready"


def unsolvable_pattern(make_sb, seed, rate, n=30):
    sb = make_sb(seed=seed, threads=n, solve_s=0.5, unsolvable_rate=rate)
    ids = [submit(sb)["request"] for _ in range(n)]
    wait_ready(sb, ids[-1])
    return [task(sb, i)["status"] == "unsolvable" for i in ids]


def test_unsolvable_by_seeded_rate(make_sb):
    first = unsolvable_pattern(make_sb, 7, 0.4)
    assert first == unsolvable_pattern(make_sb, 7, 0.4)
    assert first != unsolvable_pattern(make_sb, 8, 0.4)
    assert 3 <= sum(first) <= 22
    assert not any(unsolvable_pattern(make_sb, 7, 0.0)) and all(unsolvable_pattern(make_sb, 7, 1.0))


def test_submit_and_poll_parameter_errors(make_sb):
    sb = make_sb(valid_keys={SANDBOX_KEY, "a" * 32})
    ok = {"method": "userrecaptcha", "googlekey": sitekey_for("west"), "pageurl": f"{sb.portal_url}/export"}
    cases = [
        ({"googlekey": ""}, "ERROR_GOOGLEKEY"),
        ({"pageurl": ""}, "ERROR_PAGEURL"),
        ({"pageurl": "not a url"}, "ERROR_PAGEURL"),
        ({"googlekey": "6LnotFromThePortal"}, "ERROR_WRONG_GOOGLEKEY"),
        ({"method": "base64"}, "ERROR_BAD_PARAMETERS"),
        ({"method": ""}, "ERROR_BAD_PARAMETERS"),
    ]
    for change, code in cases:
        assert call(sb, "in.php", **{**ok, **change}) == {"status": 0, "request": code}, change
    assert sb.tasks() == []
    task_id = call(sb, "in.php", **ok)["request"]
    assert call(sb, "res.php", action="get", id="12ab")["request"] == "ERROR_WRONG_ID_FORMAT"
    assert call(sb, "res.php", action="get", id="")["request"] == "ERROR_WRONG_ID_FORMAT"
    assert call(sb, "res.php", action="get", id="123")["request"] == "ERROR_WRONG_CAPTCHA_ID"
    assert call(sb, "res.php", key="a" * 32, action="get", id=task_id)["request"] == "ERROR_WRONG_CAPTCHA_ID"
    assert call(sb, "res.php", id=task_id)["request"] == "ERROR_EMPTY_ACTION"


def test_report_bad_and_good_and_balance(make_sb):
    sb = make_sb()
    a, b = submit(sb)["request"], submit(sb)["request"]
    assert call(sb, "res.php", action="reportbad", id=a) == {"status": 1, "request": "OK_REPORT_RECORDED"}
    assert call(sb, "res.php", action="reportgood", id=b) == {"status": 1, "request": "OK_REPORT_RECORDED"}
    assert call(sb, "res.php", action="reportbad", id="999")["request"] == "ERROR_WRONG_CAPTCHA_ID"
    assert (task(sb, a)["reported_bad"], task(sb, a)["reported_good"]) == (True, False)
    assert (task(sb, b)["reported_bad"], task(sb, b)["reported_good"]) == (False, True)
    assert call(sb, "res.php", action="getbalance") == {"status": 1, "request": "12.345"}


# ── faults ───────────────────────────────────────────────────────────────────
def check_fault_answer(kind, endpoint, send):
    if kind == "reset":
        with pytest.raises(requests.ConnectionError):
            send()
        return
    if kind == "slow":
        with pytest.raises(requests.Timeout):
            send(timeout=0.05)
        return
    resp = send()
    if kind in ("html500", "html502"):
        assert resp.status_code == int(kind[4:]) and resp.headers["Content-Type"].startswith("text/html")
        assert resp.text.startswith("<html")
    elif kind == "plaintext":  # json=1 ignored
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
        assert resp.text == ("CAPCHA_NOT_READY" if endpoint == "res.php" else "ERROR_SERVER_ERROR")
    else:
        code = {"server_error": "ERROR_SERVER_ERROR", "internal_error": "ERROR_INTERNAL_SERVER_ERROR"}[kind]
        assert resp.json() == {"status": 0, "request": code}


KINDS = ("html500", "html502", "plaintext", "server_error", "internal_error", "reset", "slow")


@pytest.mark.parametrize("kind", KINDS)
def test_in_php_faults_create_no_task(make_sb, kind):
    sb = make_sb(faults={"in.php": FaultPlan(schedule={0: kind}, slow_s=15)})
    fields = {
        "key": SANDBOX_KEY,
        "json": 1,
        "method": "userrecaptcha",
        "googlekey": sitekey_for("north"),
        "pageurl": f"{sb.portal_url}/export",
    }
    check_fault_answer(
        kind, "in.php", lambda timeout=5: requests.post(f"{sb.captchaai_url}/in.php", data=fields, timeout=timeout)
    )
    if kind == "slow":  # answered normally once the delay is over: the client's timeout orphans a task
        wait_until(lambda: len(sb.tasks()) == 1)
    else:
        assert sb.tasks() == []
    assert submit(sb)["status"] == 1  # the next request is healthy
    assert sb.stats()["faults"] == {"in.php": {kind: 1}}


@pytest.mark.parametrize("kind", KINDS)
def test_res_php_faults_leave_task_unchanged(make_sb, kind):
    sb = make_sb(solve_s=0.1, faults={"res.php": FaultPlan(schedule={0: kind}, slow_s=15)})
    task_id = submit(sb)["request"]
    wait_ready(sb, task_id)
    get = {"key": SANDBOX_KEY, "json": 1, "action": "get", "id": task_id}
    started = time.monotonic()
    check_fault_answer(
        kind, "res.php", lambda timeout=5: requests.post(f"{sb.captchaai_url}/res.php", data=get, timeout=timeout)
    )
    if kind == "slow":  # the delayed request is then answered (and counted) normally
        wait_until(lambda: task(sb, task_id)["polls"] == 1)
        assert time.monotonic() - started >= 15 * SCALE
    else:
        assert task(sb, task_id)["polls"] == 0 and sb.stats()["tokens"]["issued"] == 0
    assert call(sb, "res.php", action="get", id=task_id)["status"] == 1
    assert sb.stats()["faults"] == {"res.php": {kind: 1}}


def test_slow_fault_answers_normally_after_delay(make_sb):
    sb = make_sb(faults={"res.php": FaultPlan(schedule={0: "slow"}, slow_s=10)})
    started = time.monotonic()
    assert call(sb, "res.php", action="threadsinfo")["threads"] == "5"
    assert time.monotonic() - started >= 10 * SCALE


def test_fault_rate_is_seeded_and_kinds_respected(make_sb):
    def pattern(seed, plan):
        sb = make_sb(seed=seed, faults={"res.php": plan})
        answers = [
            requests.post(
                f"{sb.captchaai_url}/res.php", timeout=5, data={"key": SANDBOX_KEY, "action": "threadsinfo", "json": 1}
            )
            for _ in range(40)
        ]
        return [r.status_code if r.status_code != 200 else r.json().get("request", "ok") for r in answers]

    plan = FaultPlan(rate=0.3, kinds=("html502", "server_error"))
    first = pattern(5, plan)
    assert first == pattern(5, plan) and first != pattern(6, plan)
    assert 4 <= sum(x != "ok" for x in first) <= 24
    assert set(pattern(5, FaultPlan(rate=1.0, kinds=("html502", "server_error")))) == {502, "ERROR_SERVER_ERROR"}


def test_schedule_is_deterministic_and_restarts_on_configure(make_sb):
    sb = make_sb(faults={"res.php": FaultPlan(rate=0.0, schedule={0: "html502", 2: "internal_error"})})

    def answer():
        r = requests.post(
            f"{sb.captchaai_url}/res.php", data={"key": SANDBOX_KEY, "action": "getbalance", "json": 1}, timeout=5
        )
        return r.status_code if r.status_code != 200 else r.json()["request"]

    assert [answer() for _ in range(4)] == [502, "12.345", "ERROR_INTERNAL_SERVER_ERROR", "12.345"]
    sb.configure(faults={"res.php": FaultPlan(schedule={0: "html500"})})
    assert [answer() for _ in range(2)] == [500, "12.345"]
    sb.configure(faults={})
    assert answer() == "12.345"


@pytest.mark.parametrize("kind", ["html500", "html502", "reset", "slow", "server_error"])
def test_portal_get_faults_open_no_session(make_sb, kind):
    sb = make_sb(faults={"portal_get": FaultPlan(schedule={0: kind}, slow_s=15)})
    s = requests.Session()
    if kind == "server_error":  # no JSON codes on a web page: an HTML 500
        resp = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
        assert resp.status_code == 500 and resp.text.startswith("<html")
    else:
        check_fault_answer(
            kind,
            "portal_get",
            lambda timeout=5: s.get(f"{sb.portal_url}/export", timeout=timeout, params={"day": DAY, "region": "north"}),
        )
    assert "portal_session" not in s.cookies
    open_page(s, sb)  # the next GET is healthy
    assert sb.stats()["faults"] == {"portal_get": {kind: 1}}


@pytest.mark.parametrize("kind", ["html500", "html502", "reset"])
def test_portal_post_faults_keep_the_token_unspent(make_sb, kind):
    sb = make_sb(solve_s=0.1, faults={"portal_post": FaultPlan(schedule={0: kind})})
    s = requests.Session()
    token = solved_token(sb, s)
    check_fault_answer(kind, "portal_post", lambda timeout=5: post_export(s, sb, token, timeout=timeout))
    assert post_export(s, sb, token).status_code == 200
    assert sb.stats()["tokens"]["accepted"] == 1


def test_portal_post_slow_fault_still_spends_the_token(make_sb):
    sb = make_sb(solve_s=0.1, faults={"portal_post": FaultPlan(schedule={0: "slow"}, slow_s=10)})
    s = requests.Session()
    token = solved_token(sb, s)
    with pytest.raises(requests.Timeout):
        post_export(s, sb, token, timeout=0.03)
    wait_until(lambda: sb.stats()["tokens"]["accepted"] == 1)  # the server went on without the client
    assert post_export(s, sb, token).json() == {"error": "timeout-or-duplicate"}


# ── portal refusals ──────────────────────────────────────────────────────────
def test_portal_page_validation(make_sb):
    sb = make_sb()
    s = requests.Session()
    for params, status in [
        ({"day": DAY, "region": "ma rs"}, 404),
        ({"day": DAY, "region": "../etc"}, 404),
        ({"day": "2024-13-01", "region": "north"}, 400),
        ({"day": "20240301", "region": "north"}, 400),
        ({"region": "north"}, 400),
    ]:
        assert s.get(f"{sb.portal_url}/export", params=params, timeout=5).status_code == status
    page = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "south"}, timeout=5)
    assert f'data-sitekey="{sitekey_for("south")}"' in page.text
    assert 'name="day" value="2024-03-01"' in page.text and 'name="region" value="south"' in page.text


def test_token_reuse_and_expiry_refused(make_sb):
    sb = make_sb(solve_s=0.1, token_validity_s=20)
    s = requests.Session()
    token = solved_token(sb, s)
    assert post_export(s, sb, token).status_code == 200
    reused = post_export(s, sb, token)
    assert (reused.status_code, reused.json()) == (403, {"error": "timeout-or-duplicate"})
    late = solved_token(sb, s, "south")
    time.sleep(20 * SCALE + 0.01)
    assert post_export(s, sb, late, "south").json() == {"error": "token-expired"}
    assert sb.stats()["tokens"]["refused"] == {"timeout-or-duplicate": 1, "token-expired": 1}


def test_token_needs_the_cookie_of_its_page(make_sb):
    sb = make_sb(solve_s=0.1)
    mine, other = requests.Session(), requests.Session()
    token = solved_token(sb, mine, "west")
    assert post_export(requests.Session(), sb, token, "west").json() == {"error": "missing-session"}
    open_page(other, sb, "east")  # a real session, but it never served the west page
    assert post_export(other, sb, token, "west").json() == {"error": "wrong-session"}
    forged = requests.Session()
    forged.cookies.set("portal_session", "forged")
    assert post_export(forged, sb, token, "west").json() == {"error": "missing-session"}
    assert post_export(mine, sb, token, "west").status_code == 200  # refusals before the token check keep it


def test_token_for_wrong_sitekey_pageurl_or_unknown_refused(make_sb):
    sb = make_sb(solve_s=0.1)
    s = requests.Session()
    page_url, _ = open_page(s, sb, "north")
    wrong_key = solved_token(sb, s, "north", googlekey=sitekey_for("south"), pageurl=page_url)
    assert post_export(s, sb, wrong_key).json() == {"error": "wrong-sitekey"}
    wrong_url = solved_token(sb, s, "north", pageurl="https://portal.example/export?day=2024-03-01&region=north")
    assert post_export(s, sb, wrong_url).json() == {"error": "wrong-pageurl"}
    assert post_export(s, sb, "03AFcWeA" + "x" * 300).json() == {"error": "unknown-token"}
    assert post_export(s, sb, "").json() == {"error": "missing-input-response"}
    assert post_export(s, sb, wrong_key).json() == {"error": "timeout-or-duplicate"}  # verified once, like Google
    refused = sb.stats()["tokens"]["refused"]
    assert refused == {
        "wrong-sitekey": 1,
        "wrong-pageurl": 1,
        "unknown-token": 1,
        "missing-input-response": 1,
        "timeout-or-duplicate": 1,
    }


def test_one_cookie_may_hold_several_pages(make_sb):
    sb = make_sb(solve_s=0.1)
    s = requests.Session()
    north, south = solved_token(sb, s, "north"), solved_token(sb, s, "south")
    assert post_export(s, sb, north, "north").status_code == 200
    assert post_export(s, sb, south, "south").json()["records"] == expected_records(DAY, "south")


# ── statistics ───────────────────────────────────────────────────────────────
def test_stats_counts_masks_and_http_endpoint(make_sb):
    sb = make_sb(threads=3, solve_s=100)
    for _ in range(3):
        submit(sb)
    requests.get(f"{sb.captchaai_url}/res.php", params={"key": SANDBOX_KEY, "action": "threadsinfo"}, timeout=5)
    requests.post(f"{sb.captchaai_url}/res.php?key={SANDBOX_KEY}", data={"action": "getbalance"}, timeout=5)
    call(sb, "res.php", action="getbalance")  # key in the body: not counted
    stats = sb.stats()
    assert stats["key_in_query"] == 2
    assert stats["threads"]["peak"] == 3 and stats["threads"]["in_use"] == 3 and stats["threads"]["limit"] == 3
    assert stats["submits"] == {"5a4d…": 3}
    assert stats["requests"] == {"in.php": 3, "res.php": 3}
    assert stats["actions"] == {"threadsinfo": 1, "getbalance": 2}
    over_http = requests.get(f"{sb.captchaai_url}/_sandbox/stats", timeout=5)
    assert SANDBOX_KEY not in over_http.text and SANDBOX_KEY not in json.dumps(stats)
    assert over_http.json()["submits"] == stats["submits"] and over_http.json()["key_in_query"] == 2
    assert [t["id"] for t in requests.get(f"{sb.captchaai_url}/_sandbox/tasks", timeout=5).json()] == [
        t["id"] for t in sb.tasks()
    ]
    sb.reset_stats()
    fresh = sb.stats()
    assert fresh["key_in_query"] == 0 and fresh["submits"] == {} and fresh["requests"] == {}
    assert fresh["threads"]["in_use"] == 3 and fresh["threads"]["timeline"][0][1] == 3  # still held


def test_timeline_is_ordered_and_relative_to_start(make_sb):
    sb = make_sb(threads=4, solve="uniform", solve_min_s=20, solve_max_s=40)
    ids = [submit(sb)["request"] for _ in range(4)]
    wait_until(lambda: all(task(sb, i)["status"] == "ready" for i in ids))
    timeline = sb.stats()["threads"]["timeline"]
    times = [t for t, _ in timeline]
    assert times == sorted(times) and times[0] == 0.0 and times[-1] <= sb.now()
    assert max(n for _, n in timeline) == 4 and timeline[-1][1] == 0


# ── records, solve models, config ────────────────────────────────────────────
def test_expected_records_are_deterministic_and_varied():
    records = expected_records(DAY, "north")
    assert records == expected_records(DAY, "north") and records != expected_records(DAY, "south")
    assert len({r["record_id"] for r in records}) == len(records)
    assert 3 <= len(records) <= 12 and len(expected_records(DAY, "west", (5, 5))) == 5
    keys = list(records[0])
    assert keys != sorted(keys) and keys[0] == "record_id"
    types = {type(v) for r in records for v in r.values()}
    assert {str, int, float, bool, dict} <= types
    assert any(r["note"] is None for r in expected_records("2024-01-01", "east") + records)
    assert sitekey_for("north").startswith("6Lsandbox-north-") and len(sitekey_for("north")) == 40
    assert len({sitekey_for(r) for r in ("north", "south", "east", "west")}) == 4
    for bad in ("ma rs", "../x", ""):  # any name of letters, digits, - and _ is a region; nothing else
        with pytest.raises(ValueError):
            sitekey_for(bad)
    assert region_of_sitekey(sitekey_for("mars")) == "mars" and expected_records(DAY, "mars")
    for name in ("north-east", "a-b-c_1", "x" * 60):  # names with "-" and long names map back too
        assert region_of_sitekey(sitekey_for(name)) == name
    assert region_of_sitekey(sitekey_for("north") + "x") is None and region_of_sitekey("6Lother") is None


@pytest.mark.parametrize(
    "fields, low, high",
    [
        ({"solve": "fixed", "solve_s": 20}, 20, 20),
        ({"solve": "uniform", "solve_min_s": 5, "solve_max_s": 30}, 5, 30),
        ({"solve": "lognormal", "solve_median_s": 15, "solve_sigma": 0.5}, 0.1, 1000),
    ],
)
def test_solve_models_are_seeded_and_scaled(make_sb, fields, low, high):
    def times(seed):
        sb = make_sb(seed=seed, threads=20, **fields)
        for _ in range(20):
            submit(sb)
        return [t["solve_s"] / SCALE for t in sb.tasks()]

    first = times(3)
    assert first == times(3) and all(low - 1e-3 <= x <= high + 1e-3 for x in first)
    if fields["solve"] != "fixed":
        assert first != times(4) and len(set(first)) > 10


def test_config_validation():
    with pytest.raises(ValueError):
        FaultPlan(kinds=("explode",))
    with pytest.raises(ValueError):
        SandboxConfig(faults={"submit": FaultPlan()})
    with pytest.raises(ValueError):
        SandboxConfig(solve="gamma")
    with pytest.raises(RuntimeError):
        Sandbox().stats()


# ── command line ─────────────────────────────────────────────────────────────
def test_cli_serves_and_exits_cleanly_on_sigterm(tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--time-scale",
            str(SCALE),
            "--solve",
            "fixed:1",
            "--threads",
            "3",
            "--unsolvable-sitekey",
            "north",
            "--fault",
            "in.php:0",
            "--ready-file",
            str(ready),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(ready.exists, timeout=10)
        line = json.loads(proc.stdout.readline())
        assert json.loads(ready.read_text()) == line and not list(tmp_path.glob("*.tmp"))
        assert line["key"] == SANDBOX_KEY and line["pid"] == proc.pid
        url = line["captchaai_url"]
        assert requests.post(
            f"{url}/res.php", data={"key": SANDBOX_KEY, "action": "threadsinfo"}, timeout=5
        ).json() == {"threads": "3", "working_threads": 0}
        page = requests.get(f"{line['portal_url']}/export", params={"day": DAY, "region": "north"}, timeout=5)
        task_id = requests.post(
            f"{url}/in.php",
            timeout=5,
            data={
                "key": SANDBOX_KEY,
                "method": "userrecaptcha",
                "googlekey": sitekey_for("north"),
                "pageurl": page.url,
            },
        ).text[3:]
        get = {"key": SANDBOX_KEY, "action": "get", "id": task_id}
        wait_until(lambda: requests.post(f"{url}/res.php", data=get, timeout=5).text != "CAPCHA_NOT_READY")
        assert requests.post(f"{url}/res.php", data=get, timeout=5).text == "ERROR_CAPTCHA_UNSOLVABLE"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=scaled(5)) == 0
        assert proc.stderr.read() == ""  # nothing logged per request
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_cli_rejects_bad_arguments(capsys):
    from sandbox.cli import main

    for bad in (["--solve", "gamma:3"], ["--fault", "nowhere:0.5"], ["--fault", "in.php:0.5:explode"]):
        with pytest.raises(SystemExit) as exit_:
            main(bad)
        assert exit_.value.code == 2 and "error" in capsys.readouterr().err
