"""The answers the real CaptchaAI gives (shared/CONTRACT.md "Answers the service gives"): every code of its documented
submit and result tables through the real client and one region's export against the sandbox, and rate limits from
the service and the portal, waited out for their Retry-After with no attempt spent."""

import datetime
import json
import re
from pathlib import Path

import pytest

from portal_export import errors
from portal_export.breaker import KeyBreaker
from portal_export.captchaai import CaptchaAI
from portal_export.errors import ExportError, KeyLevelError, PermanentError
from portal_export.gate import Gate
from portal_export.retry_policy import export_region
from portal_export.store import LocalStore
from sandbox import REGIONS, SANDBOX_KEY, FaultPlan

DAY = datetime.date(2026, 9, 1)

# CaptchaAI's submit (in.php) table, then its result (res.php) table: each code and the outcome docs/failures.md gives
SUBMIT = {
    "ERROR_WRONG_USER_KEY": "breaker",
    "ERROR_KEY_DOES_NOT_EXIST": "breaker",
    "IP_BANNED": "breaker",
    "ERROR_IP_NOT_ALLOWED": "breaker",
    "ERROR_ZERO_BALANCE": "submitted again",  # once, while plan threads are free: the plan is there
    "ERROR_NO_SLOT_AVAILABLE": "wait",
    "ERROR_PAGEURL": "fail once",
    "ERROR_GOOGLEKEY": "fail once",
    "ERROR_WRONG_GOOGLEKEY": "fail once",
    "ERROR_BAD_TOKEN_OR_PAGEURL": "fail once",
    "ERROR_BAD_PARAMETERS": "fail once",
    "ERROR_BAD_PROXY": "fail once",
    "ERROR_ZERO_CAPTCHA_FILESIZE": "fail once",
    "ERROR_TOO_BIG_CAPTCHA_FILESIZE": "fail once",
    "ERROR_WRONG_FILE_EXTENSION": "fail once",
    "ERROR_IMAGE_TYPE_NOT_SUPPORTED": "fail once",
    "ERROR_UPLOAD": "fail once",
    "ERROR_SERVER_ERROR": "submitted again",
    "ERROR_INTERNAL_SERVER_ERROR": "submitted again",
    "ERROR_SOMETHING_UNDOCUMENTED": "fail once",
}
RESULT = {
    "ERROR_WRONG_USER_KEY": "breaker",
    "ERROR_KEY_DOES_NOT_EXIST": "breaker",
    "IP_BANNED": "breaker",
    "ERROR_IP_NOT_ALLOWED": "breaker",
    "ERROR_EMPTY_ACTION": "fail once",
    "ERROR_WRONG_ID_FORMAT": "fail once",
    "ERROR_WRONG_CAPTCHA_ID": "fail once",
    "ERROR_SERVER_ERROR": "polled on",
    "ERROR_INTERNAL_SERVER_ERROR": "polled on",
    "ERROR_PROXY_CONNECTION_FAILED": "polled on",
    "ERROR_CAPTCHA_UNSOLVABLE": "resubmitted once",
    "ERROR_BAD_DUPLICATES": "resubmitted once",
}


def test_the_tables_name_every_code_the_client_maps():
    assert (set(SUBMIT) | set(RESULT)) - {"ERROR_SOMETHING_UNDOCUMENTED"} == set(errors.CODES)


def test_the_docs_table_gives_each_code_the_class_the_code_does():
    text = (Path(__file__).parents[2] / "docs" / "failures.md").read_text()
    rows = text.split("<!-- codes:", 1)[1].split("<!-- /codes -->", 1)[0].splitlines()[3:]
    documented = {}
    for row in rows:
        codes, _, cls, _ = (cell.strip() for cell in row.strip().strip("|").split("|"))
        documented.update(dict.fromkeys(re.findall(r"`([A-Z_]+)`", codes), cls))
    assert documented == errors.CODES


def export_north(live, tmp_path, **client):
    store = LocalStore(tmp_path / "data")
    gate = Gate(store, configured=4, plan_every_s=0.2, follows_plan=False)
    timing = dict(timeout_s=3.0, first_poll_s=0.04, poll_every_s=0.02, http_timeout_s=2.0)
    solver = CaptchaAI(
        SANDBOX_KEY, live.captchaai_url, **timing, **client, breaker=KeyBreaker(store, SANDBOX_KEY), gate=gate
    )
    outcome = export_region(
        DAY, "north", live.portal_url, solver, sink=lambda rows: sum(1 for _ in rows), retry_base_s=0.01
    )
    return outcome, solver


@pytest.mark.parametrize(
    "endpoint, code, outcome",
    [("in.php", c, o) for c, o in SUBMIT.items()] + [("res.php", c, o) for c, o in RESULT.items()],
)
def test_each_documented_code_has_its_outcome(endpoint, code, outcome, live, tmp_path):
    live.configure(faults={endpoint: FaultPlan(schedule={0: code})})
    breaker = Path(KeyBreaker(LocalStore(tmp_path / "data"), SANDBOX_KEY).location)
    if outcome in ("fail once", "breaker"):
        with pytest.raises(ExportError) as info:
            export_north(live, tmp_path)
        assert info.value.code == code
        assert isinstance(info.value, KeyLevelError) == (outcome == "breaker")
        assert isinstance(info.value, PermanentError)
        assert live.stats()["requests"]["portal_get"] == 1  # no fresh attempt
        assert breaker.exists() == (outcome == "breaker")
        return
    out, solver = export_north(live, tmp_path)
    tasks = live.tasks()
    assert out.status == "ok" and out.rows == len(live.expected_records(DAY, "north")) and not breaker.exists()
    fresh = outcome == "resubmitted once"  # the one resubmission is from a fresh page; no retry is spent
    assert out.attempts == 1 + fresh and out.transient_errors == []
    assert (out.task_ids, solver.busy_waits) == (
        [t["id"] for t in tasks],
        int(outcome == "wait"),
    )
    assert len(tasks) == 1 + fresh
    assert live.stats()["requests"]["in.php"] == len(tasks) + (outcome in ("submitted again", "wait"))
    resent = endpoint == "in.php" and code in ("ERROR_SERVER_ERROR", "ERROR_INTERNAL_SERVER_ERROR")
    assert solver.resent == ([code] if resent else [])


# ------------------------------------------------------------------------------------------- rate limits


@pytest.mark.parametrize(
    "endpoint, kind",
    [
        ("in.php", "rate_limit"),  # Retry-After: 1 (seconds)
        ("in.php", "rate_limit_bare"),  # no Retry-After: the backoff's first second
        ("res.php", "rate_limit_date"),  # Retry-After: an HTTP date
        ("res.php", "unavailable"),  # 503 with Retry-After
        ("portal_get", "unavailable"),
        ("portal_post", "rate_limit"),  # the form post, token and all, sent again
    ],
)
def test_a_rate_limit_is_waited_out_and_the_same_request_sent_again(endpoint, kind, live, tmp_path, caplog):
    live.configure(faults={endpoint: FaultPlan(schedule={0: kind}, retry_after_s=0.5)})  # 1 s, whole seconds
    out, solver = export_north(live, tmp_path)
    stats = live.stats()
    assert stats["rate_limited"] == {endpoint: 1} and stats["early"] == {}  # nothing sent before it was allowed
    assert (out.status, out.attempts, out.transient_errors, len(out.task_ids)) == ("ok", 1, [], 1)
    assert stats["tokens"]["accepted"] == 1 and stats["requests"]["in.php"] == 1 + (endpoint == "in.php")
    assert "(no attempt spent)" in caplog.text


def test_a_rate_limit_past_the_solves_deadline_is_the_error_it_is(live, tmp_path):
    """Retry-After beyond `timeout_s`: the submit is not held past its deadline; a fresh attempt follows."""
    live.configure(faults={"in.php": FaultPlan(schedule={0: "rate_limit"}, retry_after_s=500)})  # 5 s > 3 s
    out, _ = export_north(live, tmp_path)
    assert (out.status, out.attempts, out.transient_errors) == ("ok", 2, ["HTTP_429"])
    assert live.stats()["rate_limited"] == {"in.php": 1}


def test_a_day_whose_first_submits_find_no_slot_and_whose_poll_is_rate_limited_completes_exactly(live, cli, data_dir):
    """Through the real CLI: the first two submits answered ERROR_NO_SLOT_AVAILABLE, one poll 429 with Retry-After.
    The day is exact, with one accepted submit per region, no attempt spent, nothing sent before it was allowed."""
    live.configure(
        faults={
            "in.php": FaultPlan(schedule={0: "ERROR_NO_SLOT_AVAILABLE", 1: "ERROR_NO_SLOT_AVAILABLE"}),
            "res.php": FaultPlan(schedule={1: "rate_limit"}, retry_after_s=0.5, actions=("get",)),
        }
    )
    run = cli("export", str(DAY))
    assert run.code == 0, run
    stats = live.stats()
    assert stats["codes"]["in.php"] == {"ERROR_NO_SLOT_AVAILABLE": 2}
    assert stats["rate_limited"] == {"res.php": 1} and stats["early"] == {}
    assert stats["tokens"]["accepted"] == 4 == len(live.tasks())  # one accepted submit per region, nothing else
    lines = (data_dir / f"portal_records_{DAY}.jsonl").read_text().splitlines()
    assert lines == [
        json.dumps(r, ensure_ascii=False) for region in REGIONS for r in live.expected_records(DAY, region)
    ]
    health = json.loads((data_dir / f"portal_records_{DAY}.health.json").read_text())
    regions = health["regions"].values()
    assert sum(r["busy_waits"] for r in regions) == 2, health  # the refusals, waited out
    assert all(r["attempts"] == 1 and r["transient_errors"] == [] for r in regions), health
