"""Every row of the error table (README "When things fail"), through the real tasks and client
against the sandbox over HTTP.

Each test shows the attempts the region made (its target, the log, luigid) and the requests that
reached the sandbox (its stats and tasks()). Permanent rows run the real CLI under a central
scheduler with a retry base of 30 s, so a retry, or a wait for one, would show in the run's wall
time; transient rows that end well run Luigi in this process, those that must fail the CLI.
"""

import datetime
import itertools
import json
import threading
import time
from collections import Counter
from pathlib import Path

import luigi
import pytest
import requests
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from portal_export.breaker import KeyBreaker
from portal_export.captchaai import SUBMIT_RESENDS, CaptchaAI
from portal_export.errors import BusyThreads, TransientError
from portal_export.store import LocalStore
from sandbox import NO_PLAN_KEY, REGIONS, SANDBOX_KEY, FaultPlan, sitekey_for
from tasks import DayExport, RegionExport
from tests.helpers.runs import read_region
from tests.helpers.speed import scaled

UNKNOWN_KEY = "f" * 32  # well-formed, no such account
SHORT_KEY = "not-a-key"
TASK_FAILED = 30  # luigi.cfg [retcode] task_failed


def day(n):
    """Days of their own per test: the module shares one luigid."""
    return datetime.date(2026, 8, n)


def captchaai_requests(sb):
    r = sb.stats()["requests"]
    return r.get("in.php", 0) + r.get("res.php", 0)


def facts(data_dir, d, region):
    """A region target's facts, its records under "records"."""
    facts, records = read_region(data_dir / "regions" / str(d) / f"{region}.jsonl")
    return {**facts, "records": records}


def day_files(data_dir, d):
    return [
        p for p in (data_dir / f"portal_records_{d}.jsonl", data_dir / f"portal_records_{d}.health.json") if p.exists()
    ]


def served(sb):
    """The sandbox's tasks in submit order."""
    return sorted(sb.tasks(), key=lambda t: t["submit_t"])


def faults(**schedules):
    """{endpoint: FaultPlan} from {endpoint: {request index: kind}}."""
    return {endpoint.replace("_php", ".php"): FaultPlan(schedule=s) for endpoint, s in schedules.items()}


def watch(predicate, action, timeout=20.0):
    """Run `action` once, from a thread, as soon as `predicate()` holds."""

    def loop():
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            if predicate():
                action()
                return
            time.sleep(0.002)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def north_only(fast_cfg):
    """One region: the sandbox's fault schedules then hit a known attempt."""

    def layer(**sections):
        return fast_cfg({**sections, "portal": {"regions": "north", **sections.get("portal", {})}})

    return layer


# ------------------------------------------------------------------------------------------- permanent


@pytest.fixture
def stub_portal(live, monkeypatch):
    """A portal of our own for what the sandbox's cannot serve (no sitekey, an unknown one, a
    malformed answer); PORTAL_BASE_URL points at it."""

    class Stub:
        def __init__(self):
            self.page = '<div class="g-recaptcha" data-sitekey="{sitekey}"></div>'
            self.answer = "<html>thank you</html>"  # the form post's 200 body
            self.seen = Counter()

        def __call__(self, environ, start_response):
            request = Request(environ)
            self.seen[request.method] += 1
            if request.method == "GET":
                region = request.args.get("region", "")
                body = self.page.format(sitekey=sitekey_for(region) if region in REGIONS else "")
                return Response(body, mimetype="text/html")(environ, start_response)
            return Response(self.answer, mimetype="text/html")(environ, start_response)

    stub = Stub()
    server = make_server("127.0.0.1", 0, stub, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    monkeypatch.setenv("PORTAL_BASE_URL", f"http://127.0.0.1:{server.port}")
    yield stub
    server.shutdown()
    thread.join()


@pytest.fixture
def permanent(live, fast_cfg, shared_central, cli, data_dir):
    """Runs for permanent rows: central scheduler, every region, a retry base of 30 s."""
    fast_cfg({"portal": {"retry_base_s": 30, "retry_jitter_s": 0}})

    def run(d, *, key=SANDBOX_KEY, command="export"):
        argv = [command, str(d)] if command == "export" else [command, str(d), str(d + datetime.timedelta(days=1))]
        return cli(*argv, CAPTCHAAI_API_KEY=key, **shared_central.env)

    return run


def assert_failed_once_with(central, run, data_dir, d, code, regions=REGIONS):
    """Non-zero and prompt; every region DISABLED in luigid with the code first in its error; the
    code in the log once per region; nothing written."""
    assert run.code == TASK_FAILED, run
    assert "retrying in" not in run.err, run  # no retry, which would wait out a 30 s backoff
    disabled = central.task_list("DISABLED", search=str(d))
    for region in regions:
        task_id = RegionExport(date=d, region=region).task_id
        assert task_id in disabled, (region, list(disabled))
        assert central.error(task_id).startswith(f"{code}: "), central.error(task_id)[:300]
    failures = [line for line in run.err.splitlines() if " failed    RegionExport(" in line]
    assert len(failures) == len(regions), failures
    assert run.err.count(f"Error: {code}: ") >= len(regions)  # "...KeyLevelError: IP_BANNED: ..." per traceback
    assert not (data_dir / "regions" / str(d)).exists() or not list((data_dir / "regions" / str(d)).glob("*.jsonl"))
    assert day_files(data_dir, d) == []


@pytest.mark.parametrize(
    "row, code",
    [
        ("wrong-user-key", "ERROR_WRONG_USER_KEY"),
        ("key-does-not-exist", "ERROR_KEY_DOES_NOT_EXIST"),
        ("ip-banned", "IP_BANNED"),
    ],
)
@pytest.mark.unmeasured
def test_a_bad_key_fails_every_region_once_and_sends_no_more(row, code, live, permanent, shared_central, data_dir):
    d = day({"wrong-user-key": 1, "key-does-not-exist": 2, "ip-banned": 3}[row])
    key = {"wrong-user-key": SHORT_KEY, "key-does-not-exist": UNKNOWN_KEY, "ip-banned": SANDBOX_KEY}[row]
    if row == "ip-banned":  # another client on this IP earned a ban: the good key is banned too
        live.configure(ban_after=1, ban_s=3000)
        requests.post(f"{live.captchaai_url}/in.php", data={"key": UNKNOWN_KEY, "json": 1}, timeout=5)
        live.reset_stats()

    run = permanent(d, key=key)
    assert_failed_once_with(shared_central, run, data_dir, d, code)
    stats = live.stats()
    # The run's first request (the plan check's threadsinfo) got the code and tripped the breaker:
    # no region sent anything, nor loaded a page it could not use.
    assert stats["requests"] == {"res.php": 1}, stats["requests"]
    assert stats["codes"] == {"res.php": {code: 1}}
    assert stats["bad_key_requests"] == (0 if row == "ip-banned" else 1) and stats["ip_bans"] == 0
    assert f"plan check: CaptchaAI answered {code}" in run.err
    assert json.loads(Path(KeyBreaker(LocalStore(data_dir), key).location).read_text())["code"] == code

    again = permanent(d, key=key, command="backfill")  # a keep-alive backfill: re-enabled, still nothing sent
    assert "re-enabled RegionExport" in again.err
    assert_failed_once_with(shared_central, again, data_dir, d, code)
    assert captchaai_requests(live) == 1 and live.stats()["requests"].get("portal_get", 0) == 0


@pytest.mark.unmeasured
def test_no_active_plan_fails_every_region_once_and_trips_the_breaker(live, permanent, shared_central, data_dir):
    d = day(4)
    run = permanent(d, key=NO_PLAN_KEY)
    assert_failed_once_with(shared_central, run, data_dir, d, "ERROR_ZERO_BALANCE")
    stats = live.stats()
    # A refusal with free threads is retried once inside the submit (the refusal may have been a race),
    # then the second proves there is no plan. Regions already in flight may each do the same.
    refusals = stats["codes"]["in.php"]["ERROR_ZERO_BALANCE"]
    assert refusals == stats["requests"]["in.php"] and 2 <= refusals <= 2 * 4
    # The plan check, then at most one per refusal from the client's diagnosis, and at most one per
    # refusal from the governor, which reads the plan at once after a busy refusal (until the breaker
    # trips: its client shares the key's breaker).
    assert 1 + 2 <= stats["actions"]["threadsinfo"] <= 1 + 2 * refusals
    assert "no active plan" in shared_central.error(RegionExport(date=d, region="north").task_id)
    assert live.tasks() == []

    before = captchaai_requests(live)
    again = permanent(d, key=NO_PLAN_KEY, command="backfill")
    assert_failed_once_with(shared_central, again, data_dir, d, "ERROR_ZERO_BALANCE")
    assert captchaai_requests(live) == before  # the breaker holds, the plan check included


@pytest.mark.parametrize(
    "row, code",
    [
        ("no-sitekey", "NO_SITEKEY"),
        ("unknown-sitekey", "ERROR_WRONG_GOOGLEKEY"),
        ("malformed-answer", "PORTAL_BAD_ANSWER"),
    ],
)
def test_a_bad_page_or_parameter_fails_the_region_once(
    row, code, live, stub_portal, permanent, shared_central, data_dir
):
    d = day({"no-sitekey": 5, "unknown-sitekey": 6, "malformed-answer": 7}[row])
    if row == "no-sitekey":
        stub_portal.page = '<form><div class="g-recaptcha"></div></form>'
    elif row == "unknown-sitekey":
        stub_portal.page = '<div class="g-recaptcha" data-sitekey="6Lc-not-a-sitekey-the-sandbox-knows"></div>'
    else:  # JSON without a list of records (an HTML page is transient: test_live_portal.py)
        stub_portal.answer = '{"rows": []}'

    run = permanent(d)
    assert_failed_once_with(shared_central, run, data_dir, d, code)
    stats = live.stats()
    assert stub_portal.seen["GET"] == 4  # one page per region, no second attempt
    if row == "no-sitekey":
        assert stats["requests"] == {"res.php": 1}  # the plan check; no submit without a sitekey
    elif row == "unknown-sitekey":
        assert stats["requests"]["in.php"] == 4 and stats["codes"]["in.php"] == {code: 4}
        assert live.tasks() == []
    else:  # solved, posted, and the answer was no records list: the token is spent, no retry
        assert stats["requests"]["in.php"] == 4 and len(live.tasks()) == 4
        assert stub_portal.seen["POST"] == 4
        assert stats["actions"].get("reportbad", 0) == 0
    assert not (data_dir / "_state").exists() or not list((data_dir / "_state").glob("breaker-*.json"))


# ------------------------------------------------------------------------------------------- transient
# Runs that end well go through Luigi in this process (workers=1: no fork, so the sandbox's fault
# schedule meets the attempts in order); runs that must fail go through the CLI for its exit code.


def export(d):
    result = luigi.build([DayExport(date=d)], local_scheduler=True, workers=1, detailed_summary=True)
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text


# A submit the service explicitly failed on its side (its 5xx page or error code) made no task: it
# is sent again at once (twice at most) and costs no attempt. A reset after sending stays an attempt.
@pytest.mark.parametrize(
    "schedules, errors, resent, sent",
    [
        pytest.param(
            faults(in_php={0: "server_error", 1: "server_error"}),
            [],
            ["ERROR_SERVER_ERROR"] * 2,
            {"portal_get": 1, "in.php": 3, "portal_post": 1},
            id="server-error",
        ),
        pytest.param(
            faults(in_php={0: "server_error", 1: "server_error", 2: "server_error"}),
            ["ERROR_SERVER_ERROR"],
            ["ERROR_SERVER_ERROR"] * 2,
            {"portal_get": 2, "in.php": 4, "portal_post": 1},
            id="server-error-past-the-resends",
        ),
        pytest.param(
            faults(in_php={0: "internal_error"}),
            [],
            ["ERROR_INTERNAL_SERVER_ERROR"],
            {"portal_get": 1, "in.php": 2, "portal_post": 1},
            id="internal-error",
        ),
        pytest.param(
            faults(in_php={0: "html500", 1: "html502"}),
            [],
            ["HTTP_500", "HTTP_502"],
            {"portal_get": 1, "in.php": 3, "portal_post": 1},
            id="html-pages",
        ),
        pytest.param(
            faults(in_php={0: "plaintext"}),
            [],
            ["ERROR_SERVER_ERROR"],
            {"portal_get": 1, "in.php": 2, "portal_post": 1},
            id="plaintext-despite-json",
        ),
        pytest.param(
            faults(portal_get={0: "reset"}, in_php={0: "reset"}, portal_post={0: "reset"}),
            ["PORTAL_NETWORK_ERROR", "NETWORK_ERROR", "PORTAL_NETWORK_ERROR"],
            [],
            {"portal_get": 4, "in.php": 3, "portal_post": 2},
            id="network-reset",
        ),
        pytest.param(
            faults(portal_get={0: "html502"}, portal_post={0: "html500"}),
            ["PORTAL_HTTP_502", "PORTAL_HTTP_500"],
            [],
            {"portal_get": 3, "in.php": 2, "portal_post": 2},
            id="portal-5xx",
        ),
    ],
)
def test_a_transient_error_is_retried_from_a_fresh_page_and_task(
    schedules, errors, resent, sent, live, north_only, data_dir, caplog
):
    north_only()
    live.configure(faults=schedules)
    d = day(20)
    export(d)
    north = facts(data_dir, d, "north")
    assert north["status"] == "ok" and north["attempts"] == len(errors) + 1
    assert north["transient_errors"] == errors
    assert north["resent_submits"] == resent
    stats = live.stats()
    assert {k: stats["requests"].get(k, 0) for k in sent} == sent  # a fresh page each attempt, and no more
    tasks = served(live)  # a fresh task for every attempt that reached a submit; only the last delivered
    assert [t["id"] for t in tasks] == north["task_ids"] and len(tasks) == sent["portal_post"]
    assert [t["token_accepted"] for t in tasks] == [False] * (len(tasks) - 1) + [True]
    assert stats["actions"].get("reportbad", 0) == 0  # nothing was refused
    assert north["records"] == live.expected_records(d, "north")
    for n in range(1, len(errors) + 1):
        assert f"(attempt {n} of 4); retrying in" in caplog.text


def test_transient_answers_while_polling_keep_polling_the_same_task(live, north_only, data_dir, caplog):
    north_only()
    # the task's first four polls
    live.configure(faults=faults(res_php={0: "server_error", 1: "html502", 2: "reset", 3: "internal_error"}))
    d = day(21)
    export(d)
    north = facts(data_dir, d, "north")
    assert north["attempts"] == 1 and north["transient_errors"] == []
    (task,) = live.tasks()
    assert north["task_ids"] == [task["id"]] and task["token_accepted"]
    assert live.stats()["requests"]["in.php"] == 1
    assert task["polls"] >= 1  # answered polls; the four faulted ones never reached the task
    assert live.stats()["actions"]["get"] == task["polls"] + 4


def test_a_read_timeout_is_a_network_error_and_retried(live, north_only, data_dir, caplog):
    north_only(captchaai={"http_timeout_s": 0.3})
    live.configure(faults={"in.php": FaultPlan(schedule={0: "slow"}, slow_s=100)})  # answers after 1 s
    d = day(22)
    export(d)
    north = facts(data_dir, d, "north")
    assert north["attempts"] == 2 and north["transient_errors"] == ["NETWORK_ERROR"]
    assert live.stats()["requests"]["in.php"] == 2 and live.stats()["requests"]["portal_get"] == 2
    delivered = [t for t in live.tasks() if t["token_accepted"]]
    assert [t["id"] for t in delivered] == north["task_ids"]  # the slow submit's late task is not ours


def test_busy_threads_are_waited_out_spending_no_attempt(live, north_only, data_dir, caplog):
    north_only(captchaai={"plan_every_s": 0.2})
    # Another consumer holds every plan thread; one frees (the plan grows by one) after the first refusal.
    assert live.occupy_threads(5, 10_000) == 5
    refused = lambda: live.stats()["codes"].get("in.php", {}).get("ERROR_ZERO_BALANCE", 0)  # noqa: E731
    answered = lambda: live.stats()["actions"].get("threadsinfo", 0) >= 1  # noqa: E731 (the refusal's diagnosis)
    busy = watch(lambda: refused() >= 1 and answered(), lambda: live.configure(threads=6))
    d = day(23)
    export(d)
    busy.join()
    north = facts(data_dir, d, "north")
    assert (north["attempts"], north["transient_errors"]) == (1, [])  # a busy refusal is no attempt
    assert north["busy_waits"] == refused() >= 1
    assert live.stats()["requests"]["portal_get"] == 1  # the same page, submitted again once a thread freed
    (task,) = live.tasks()  # nothing was accepted while the threads were busy
    assert north["task_ids"] == [task["id"]]
    assert "all 5 plan threads busy" in caplog.text and "no attempt spent" in caplog.text


def test_a_contended_plan_is_busy_not_a_missing_plan(live, data_dir):
    """Refused; a thread frees and another consumer takes it before the resubmit; refused again. Threads
    were working throughout, so the plan is active: busy and retried, never the breaker's "no plan".
    The threads free on our calls, not at times, which a loaded machine's latency would move."""
    breaker = KeyBreaker(LocalStore(data_dir), SANDBOX_KEY)
    assert live.occupy_threads(5, 10_000) == 5  # another consumer's tasks on every thread
    refusals = []

    class BetweenOurCalls(requests.Session):
        def post(self, url, data=None, **kwargs):
            resp = super().post(url, data=data, **kwargs)
            if url.endswith("/in.php") and "ERROR_ZERO_BALANCE" in resp.text and len(refusals) < 2:
                refusals.append(live.release_threads(n=1))  # a thread frees ...
            elif data.get("action") == "threadsinfo" and len(refusals) == 1:
                assert live.occupy_threads(1, 10_000) == 1  # ... and is taken before we resubmit
            return resp

    client = CaptchaAI(SANDBOX_KEY, live.captchaai_url, session=BetweenOurCalls(), breaker=breaker)
    params = {"googlekey": sitekey_for("north"), "pageurl": f"{live.portal_url}/export?day=2026-08-31&region=north"}
    with pytest.raises(TransientError) as info:
        client.submit(params)
    assert type(info.value) is BusyThreads and info.value.code == "ERROR_ZERO_BALANCE"
    assert "4 of 5 plan threads worked" in str(info.value)
    assert refusals == [1, 1]
    assert live.stats()["codes"]["in.php"] == {"ERROR_ZERO_BALANCE": 2} and live.stats()["actions"]["threadsinfo"] == 2
    assert not Path(breaker.location).exists()
    assert client.submit(params) == live.tasks()[0]["id"]  # a thread is free now: the retry gets its task


def test_a_poll_deadline_abandons_the_task_and_retries_with_a_fresh_one(live, north_only, data_dir, caplog):
    north_only(captchaai={"timeout_s": 0.3})
    live.configure(solve_s=60)  # 0.6 s: past the deadline
    slow_first = watch(lambda: len(live.tasks()) >= 1, lambda: live.configure(solve_s=5))
    d = day(24)
    export(d)
    slow_first.join()
    north = facts(data_dir, d, "north")
    assert north["attempts"] == 2 and north["transient_errors"] == ["POLL_DEADLINE"]
    first, second = served(live)
    assert north["task_ids"] == [first["id"], second["id"]]
    assert first["token_posted_t"] is None and second["token_accepted"]
    # polled on its grid until the deadline (0.3 s), then left: however few polls a loaded machine
    # fits in, the last came within 0.1 s of the deadline
    assert first["polls"] >= 3 and first["last_poll_t"] - first["submit_t"] >= 0.2, first
    assert live.stats()["requests"]["portal_get"] == 2


def test_a_refused_token_is_reported_bad_counted_and_retried(live, north_only, data_dir, caplog):
    north_only()
    # The first form post is held 0.6 s: its token (valid 0.2 s after the solve) has expired by then.
    # The second's must not have: both scaled, for a loaded machine's slower solve-to-post.
    valid_s, held_s = scaled(20), scaled(60)
    live.configure(token_validity_s=valid_s, faults={"portal_post": FaultPlan(schedule={0: "slow"}, slow_s=held_s)})
    d = day(25)
    export(d)
    north = facts(data_dir, d, "north")
    assert north["attempts"] == 2 and north["refused_tokens"] == 1
    assert north["transient_errors"] == ["PORTAL_HTTP_403"]
    first, second = served(live)
    assert north["task_ids"] == [first["id"], second["id"]]
    assert first["reported_bad"] and not first["token_accepted"]  # reportbad reached CaptchaAI
    assert second["token_accepted"] and not second["reported_bad"]
    stats = live.stats()
    assert stats["tokens"]["refused"] == {"token-expired": 1} and stats["actions"]["reportbad"] == 1
    health = json.loads((data_dir / f"portal_records_{d}.health.json").read_text())
    assert health["refused_tokens"] == 1 and health["regions"]["north"]["refused_tokens"] == 1
    assert health["submits"] == 2


def test_retries_wait_growing_delays_with_jitter(live, north_only, data_dir, caplog):
    # waits 0.1, 0.3, 0.7 s +- 0.02, scaled: a loaded machine's latency between them grows as well
    base = scaled(0.1)
    north_only(portal={"retry_base_s": base, "retry_jitter_s": 0.02})
    # 500s: a gateway's 502 on the post would be posted again with its token instead
    live.configure(faults=faults(portal_post={0: "server_error", 1: "server_error", 2: "server_error"}))
    d = day(26)
    export(d)
    north = facts(data_dir, d, "north")
    assert north["attempts"] == 4 and north["transient_errors"] == ["PORTAL_HTTP_500"] * 3
    tasks = served(live)
    # from the poll that found the solve ready to the next submit: post + wait + page, per attempt
    gaps = [b["submit_t"] - a["last_poll_t"] for a, b in itertools.pairwise(tasks)]
    assert gaps[1] - gaps[0] > base and gaps[2] - gaps[1] > 2.5 * base, gaps  # waits grow: +0.2 s, then +0.4 s
    # The region's idle_slot_seconds is the sum of the waits as drawn: 1.1 s moved by the jitter.
    idle = north["idle_slot_seconds"]
    assert abs(idle - 11 * base) <= 0.06 and idle != pytest.approx(11 * base, abs=1e-9)


@pytest.mark.unmeasured
@pytest.mark.parametrize("row", ["server-error", "refused-token"])
def test_after_the_last_attempt_the_region_fails_and_the_run_exits_non_zero(row, live, north_only, cli, data_dir):
    north_only()
    if row == "server-error":
        live.configure(faults=faults(in_php={i: "server_error" for i in range(20)}))
        code = "ERROR_SERVER_ERROR"
    else:
        live.configure(token_validity_s=0)  # every token has expired by the time it is posted
        code = "PORTAL_HTTP_403"
    d = day(27)
    run = cli("export", str(d))
    assert run.code == TASK_FAILED, run
    assert f"TransientError: {code}: " in run.err or f"TokenRefused: {code}: " in run.err
    assert "(gave up after 4 attempts)" in run.err
    assert "(attempt 3 of 4); retrying in" in run.err and "(attempt 4 of 4)" not in run.err
    stats = live.stats()
    sends = 1 + SUBMIT_RESENDS if row == "server-error" else 1  # each attempt's submit, sent again at once
    assert stats["requests"]["portal_get"] == 4 and stats["requests"]["in.php"] == 4 * sends  # 4 attempts, no 5th
    if row == "refused-token":
        tasks = live.tasks()
        assert len(tasks) == 4 and all(t["reported_bad"] for t in tasks)
        assert stats["actions"]["reportbad"] == 4 and sum(stats["tokens"]["refused"].values()) == 4
    assert not (data_dir / "regions" / str(d) / "north.jsonl").exists() and day_files(data_dir, d) == []
    assert run.err.count("retrying in") == 3  # a backoff between attempts, none after the last


# ------------------------------------------------------------------------------------------ unsolvable


@pytest.mark.unmeasured
def test_an_unsolvable_region_is_resubmitted_once_then_counted(live, cli, data_dir):
    live.configure(unsolvable_sitekeys=frozenset({sitekey_for("east")}))
    d = day(28)
    assert cli("export", str(d)).code == 0
    health = json.loads((data_dir / f"portal_records_{d}.health.json").read_text())
    east = health["regions"]["east"]
    assert east["status"] == "unsolvable" and east["attempts"] == 2 and east["transient_errors"] == []
    assert east["solve_seconds"] is None and east["rows"] == 0
    submitted = [t for t in served(live) if t["googlekey"] == sitekey_for("east")]
    assert [t["id"] for t in submitted] == east["task_ids"] and all(t["status"] == "unsolvable" for t in submitted)
    assert live.stats()["codes"]["res.php"]["ERROR_CAPTCHA_UNSOLVABLE"] == 2
    assert health["unsolvable"] == 1 and health["unsolvable_ratio"] == 0.25 and health["solves"] == 3
    lines = (data_dir / f"portal_records_{d}.jsonl").read_text().splitlines()
    assert lines == [
        json.dumps(r, ensure_ascii=False)
        for region in ("north", "south", "west")
        for r in live.expected_records(d, region)
    ]


def fail_two_unsolvable_then_retry(live, cli, data_dir, d, **env):
    """Export a day with east and west unsolvable (it fails validation), make them solvable, then
    `retry-unsolvable`; returns the retry's run and the ids of the tasks of the failed run."""
    live.configure(unsolvable_sitekeys=frozenset({sitekey_for("east"), sitekey_for("west")}))
    run = cli("export", str(d), **env)
    assert run.code == TASK_FAILED, run  # 2 of 4 unsolvable: above 0.25
    assert "TOO_MANY_UNSOLVABLE" in run.err and day_files(data_dir, d) == []
    failed = json.loads((data_dir / "regions" / str(d) / "failed.health.json").read_text())
    assert failed["unsolvable_regions"] == ["east", "west"]
    first_round = {t["id"] for t in live.tasks()}
    assert len(first_round) == 2 + 2 * 2  # north and south once, east and west twice
    live.configure(unsolvable_sitekeys=frozenset())
    return cli("retry-unsolvable", str(d), **env), first_round


def assert_only_unsolvable_regions_were_solved_again(live, data_dir, d, first_round):
    new = [t for t in served(live) if t["id"] not in first_round]
    assert sorted(t["googlekey"] for t in new) == sorted([sitekey_for("east"), sitekey_for("west")])
    assert all(t["token_accepted"] for t in new)
    health = json.loads((data_dir / f"portal_records_{d}.health.json").read_text())
    assert health["unsolvable"] == 0 and health["solves"] == 4
    lines = (data_dir / f"portal_records_{d}.jsonl").read_text().splitlines()
    assert lines == [json.dumps(r, ensure_ascii=False) for region in REGIONS for r in live.expected_records(d, region)]
    assert not (data_dir / "regions" / str(d) / "failed.health.json").exists()


@pytest.mark.unmeasured
def test_retry_unsolvable_re_attempts_only_the_unsolvable_regions(live, cli, data_dir):
    d = day(29)
    again, first_round = fail_two_unsolvable_then_retry(live, cli, data_dir, d)
    assert again.code == 0, again
    assert_only_unsolvable_regions_were_solved_again(live, data_dir, d, first_round)


@pytest.mark.unmeasured
def test_retry_unsolvable_re_attempts_the_unsolvable_region_of_a_day_that_passed(live, cli, data_dir):
    live.configure(unsolvable_sitekeys=frozenset({sitekey_for("east")}))
    d = day(31)
    assert cli("export", str(d)).code == 0  # 1 of 4 unsolvable: the day passes, east counted
    first_round = {t["id"] for t in live.tasks()}
    live.configure(unsolvable_sitekeys=frozenset())
    again = cli("retry-unsolvable", str(d))
    assert again.code == 0, again
    new = [t for t in served(live) if t["id"] not in first_round]
    assert [t["googlekey"] for t in new] == [sitekey_for("east")] and new[0]["token_accepted"]
    health = json.loads((data_dir / f"portal_records_{d}.health.json").read_text())
    assert health["unsolvable"] == 0 and health["regions"]["east"]["status"] == "ok"


@pytest.mark.long
def test_retry_unsolvable_right_after_the_failed_run_under_luigid(live, shared_central, cli, data_dir):
    d = day(30)
    again, first_round = fail_two_unsolvable_then_retry(live, cli, data_dir, d, **shared_central.env)
    assert f"re-enabled {DayExport(date=d).task_id}" in again.err  # DayExport was DISABLED by its one failure
    assert again.code == 0, again
    assert_only_unsolvable_regions_were_solved_again(live, data_dir, d, first_round)
