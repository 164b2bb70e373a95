"""The official captchaai SDK against the sandbox: evidence it speaks CaptchaAI's protocol.

The SDK hard-codes its waits (15 s before the first poll, 5 s between polls, ~8 s
while threads are busy) and offers no setting for them, so its client module gets
a sleep on the sandbox's time scale: one clock for both sides.
"""

import re
import time
import types

import captchaai
import captchaai.client
import pytest
import requests
from captchaai import (
    APIError,
    CaptchaAI,
    InvalidKeyError,
    NetworkError,
    NoThreadsError,
    ThreadLimitError,
    UnsolvableError,
)

from sandbox import NO_PLAN_KEY, SANDBOX_KEY, FaultPlan, Sandbox, SandboxConfig, expected_records, sitekey_for

SCALE = 0.01
DAY = "2024-05-06"


@pytest.fixture(autouse=True)
def scaled_sdk_sleep(monkeypatch):
    monkeypatch.setattr(captchaai.client, "time", types.SimpleNamespace(sleep=lambda s: time.sleep(s * SCALE)))


@pytest.fixture
def make_sb():
    started = []

    def make(**fields):
        sb = Sandbox(SandboxConfig(**{"time_scale": SCALE, **fields})).start()
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop()


def page(session, sb, region):
    resp = session.get(f"{sb.portal_url}/export", params={"day": DAY, "region": region}, timeout=5)
    return resp.url, re.search(r'data-sitekey="([^"]+)"', resp.text).group(1)


def test_sdk_solves_the_portal_captcha_through_not_ready(make_sb):
    sb = make_sb(solve_s=30)  # longer than the SDK's 15 s first wait: it must see CAPCHA_NOT_READY
    solver = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url)
    s = requests.Session()
    page_url, sitekey = page(s, sb, "south")
    result = solver.recaptcha_v2(sitekey, page_url)
    stats = sb.stats()
    assert stats["polls"][result.task_id] >= 2 and stats["codes"]["res.php"]["CAPCHA_NOT_READY"] >= 1
    assert stats["key_in_query"] > 0  # the SDK submits and polls by GET: the counter sees it
    resp = s.post(
        f"{sb.portal_url}/export",
        timeout=5,
        data={"day": DAY, "region": "south", "g-recaptcha-response": result.solution},
    )
    assert resp.status_code == 200 and resp.json()["records"] == expected_records(DAY, "south")
    solver.close()


def test_sdk_manual_send_get_result_and_threads_info(make_sb):
    # 1.2 s of solve at this scale (the SDK polls for 1.8 s at most), and the clock paused until the second
    # threadsinfo found it working: on a loaded machine even 1.2 s was over before it.
    sb = make_sb(solve_s=120, threads=4)
    solver = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url)
    assert solver.threads_info() == {"threads": 4, "working_threads": 0}
    sb.pause_clock()
    task_id = solver.send("recaptcha_v2", googlekey=sitekey_for("east"), pageurl=f"{sb.portal_url}/export")
    assert solver.threads_info() == {"threads": 4, "working_threads": 1}
    sb.resume_clock()
    assert (
        solver.get_result("recaptcha_v2", task_id).solution
        == requests.post(
            f"{sb.captchaai_url}/res.php", timeout=5, data={"key": SANDBOX_KEY, "action": "get", "id": task_id}
        ).text[3:]
    )
    assert sb.stats()["polls"][task_id] >= 3


def test_sdk_maps_bad_keys_and_ip_ban(make_sb):
    sb = make_sb(ban_after=3)
    with pytest.raises(InvalidKeyError, match="not found"):
        CaptchaAI("f" * 32, base_url=sb.captchaai_url)  # ERROR_KEY_DOES_NOT_EXIST from threadsinfo
    assert sb.stats()["bad_key_requests"] == 1
    solver = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url)
    for _ in range(2):
        requests.post(f"{sb.captchaai_url}/res.php", data={"key": "bad", "action": "threadsinfo"}, timeout=5)
    with pytest.raises(APIError, match="IP banned"):
        solver.recaptcha_v2(sitekey_for("north"), f"{sb.portal_url}/export")


def test_sdk_maps_unsolvable(make_sb):
    sb = make_sb(solve_s=1, unsolvable_sitekeys={"west"})
    solver = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url)
    with pytest.raises(UnsolvableError):
        solver.recaptcha_v2(sitekey_for("west"), f"{sb.portal_url}/export?day={DAY}&region=west")


def test_sdk_maps_busy_threads_and_no_plan(make_sb):
    sb = make_sb(solve_s=1)
    sb.occupy_threads(5, 100)
    with pytest.raises(ThreadLimitError):  # ERROR_ZERO_BALANCE + threadsinfo full -> busy, no waiting allowed
        CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url, thread_busy_timeout=0).recaptcha_v2(
            sitekey_for("north"), f"{sb.portal_url}/export"
        )
    with pytest.raises(ThreadLimitError):  # auto_retry off: the SDK checks threadsinfo before submitting
        CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url, max_retries=0).recaptcha_v2(
            sitekey_for("north"), f"{sb.portal_url}/export"
        )
    with pytest.raises(NoThreadsError):  # ERROR_ZERO_BALANCE with free threads -> no plan
        CaptchaAI(NO_PLAN_KEY, base_url=sb.captchaai_url).recaptcha_v2(sitekey_for("north"), f"{sb.portal_url}/export")
    assert sb.stats()["codes"]["in.php"]["ERROR_ZERO_BALANCE"] == 2


def test_sdk_waits_for_threads_to_free(make_sb, monkeypatch):
    # While busy the SDK re-submits every 8-11 s, and reads threadsinfo right after each refusal: a
    # thread freeing in between makes it conclude "no active plan" (the race our client avoids). So
    # the threads free on an event, not at a time: in the SDK's wait after its second refusal, when
    # it has read threadsinfo, and before its third submit. A loaded machine's latency moves nothing.
    sb = make_sb(solve_s=1)
    sb.occupy_threads(5, 10_000)
    released = []

    def sleep(seconds):
        if not released and sb.stats()["codes"].get("in.php", {}).get("ERROR_ZERO_BALANCE", 0) >= 2:
            released.append(sb.release_threads())
        time.sleep(seconds * SCALE)

    monkeypatch.setattr(captchaai.client, "time", types.SimpleNamespace(sleep=sleep))
    result = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url).recaptcha_v2(
        sitekey_for("north"), f"{sb.portal_url}/export"
    )
    assert released == [5] and result.solution
    assert sb.stats()["codes"]["in.php"]["ERROR_ZERO_BALANCE"] == 2


def test_sdk_retries_server_errors_and_reports_resets(make_sb):
    sb = make_sb(solve_s=1, faults={"in.php": FaultPlan(schedule={0: "server_error", 1: "internal_error", 2: "reset"})})
    solver = CaptchaAI(SANDBOX_KEY, base_url=sb.captchaai_url)
    with pytest.raises(NetworkError):  # two transient errors retried, then the reset surfaces
        solver.recaptcha_v2(sitekey_for("north"), f"{sb.portal_url}/export")
    assert sb.stats()["faults"]["in.php"] == {"server_error": 1, "internal_error": 1, "reset": 1}
    assert sb.tasks() == []
    assert solver.recaptcha_v2(sitekey_for("north"), f"{sb.portal_url}/export").solution
