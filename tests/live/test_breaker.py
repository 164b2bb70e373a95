"""The key-level breaker across multi-day backfills: the real CLI as a subprocess against the sandbox.

The sandbox bans an IP after 5 bad-key requests here: a breaker that let more than the cap of 4
through would earn the ban these tests assert never comes.
"""

import datetime
import json
import re
import threading
import time
from pathlib import Path

import pytest

from portal_export.breaker import KeyBreaker, fingerprint
from portal_export.store import LocalStore
from sandbox import REGIONS, SANDBOX_KEY

UNKNOWN_KEY = "f" * 32  # well-formed, no such account (a revoked key answers the same)
NEW_KEY = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
BAN_AFTER = 5
FAILED_LINE = re.compile(r" failed    RegionExport\(date=(\d{4}-\d{2}-\d{2}), region=(\w+)\)$", re.M)
RAISED_LINE = re.compile(r"^portal_export\.errors\.(\w+): (\w+): ", re.M)  # a traceback's last line


def days(start, stop):
    d0, d1 = datetime.date.fromisoformat(start), datetime.date.fromisoformat(stop)
    return [d0 + datetime.timedelta(days=i) for i in range((d1 - d0).days)]


def region_failures(run):
    """{(day, region)} that the run's log says failed, and the codes their tracebacks end with."""
    failed = FAILED_LINE.findall(run.err)
    assert len(failed) == len(set(failed)), "a region failed twice in one run"
    return set(failed), [code for _, code in RAISED_LINE.findall(run.err)]


def assert_every_record_once(sb, data_dir, day_list):
    for d in day_list:
        lines = (data_dir / f"portal_records_{d}.jsonl").read_text().splitlines()
        assert lines == [
            json.dumps(r, ensure_ascii=False) for region in REGIONS for r in sb.expected_records(d, region)
        ]


def breaker_files(data_dir):
    return sorted((data_dir / "_state").glob("breaker-*.json"))


@pytest.mark.long
@pytest.mark.unmeasured
def test_a_30_day_backfill_with_a_wrong_key_sends_no_more_than_the_cap_then_clear_breaker_completes(
    live, fast_cfg, cli, data_dir
):
    live.configure(ban_after=BAN_AFTER, solve_s=1.5)  # 120 regions to export: solves of 15 ms,
    fast_cfg({"captchaai": {"first_poll_s": 0.02}})  # polled from 20 ms on
    start, stop = "2026-07-01", "2026-07-31"
    run = cli("backfill", start, stop, CAPTCHAAI_API_KEY=UNKNOWN_KEY)

    assert run.code != 0, run
    stats = live.stats()
    assert 1 <= stats["bad_key_requests"] <= 4, stats
    assert stats["ip_bans"] == 0 and not any("IP_BANNED" in c for c in stats["codes"].values())
    assert stats["requests"].get("in.php", 0) == 0 and stats["requests"].get("portal_get", 0) == 0
    failed, codes = region_failures(run)
    assert failed == {(str(d), r) for d in days(start, stop) for r in REGIONS}  # 120 regions, each once
    assert codes == ["ERROR_KEY_DOES_NOT_EXIST"] * 120  # the original code, not a generic "breaker open"
    assert "KeyLevelError: ERROR_KEY_DOES_NOT_EXIST: " in run.err
    assert "backfill 2026-07-01..2026-07-30: 30 of 30 days missing" in run.err
    (breaker,) = breaker_files(data_dir)
    assert breaker.name == f"breaker-{fingerprint(UNKNOWN_KEY)}.json" and UNKNOWN_KEY not in breaker.read_text()
    assert json.loads(breaker.read_text())["code"] == "ERROR_KEY_DOES_NOT_EXIST"
    assert "retrying in" not in run.err  # prompt: no region waited for a retry (each failed once, above)

    cleared = cli("clear-breaker")
    assert cleared.code == 0 and "breaker cleared (ERROR_KEY_DOES_NOT_EXIST)" in cleared.err
    assert breaker_files(data_dir) == []

    done = cli("backfill", start, stop)  # the live fixture's good key
    assert done.code == 0, done
    assert "backfill 2026-07-01..2026-07-30: all 30 days complete" in done.err
    assert_every_record_once(live, data_dir, days(start, stop))
    assert live.stats()["bad_key_requests"] == stats["bad_key_requests"]


@pytest.mark.unmeasured
def test_a_key_revoked_mid_backfill_stops_after_the_regions_in_flight_and_a_new_key_is_not_blocked(live, cli, data_dir):
    live.configure(ban_after=BAN_AFTER)
    start, stop = "2026-06-01", "2026-06-09"

    def revoke_after_two_days():
        while live.stats()["tokens"]["accepted"] < 8:
            time.sleep(0.002)
        live.configure(valid_keys=frozenset())  # the account's key is revoked while solves are in flight

    revoker = threading.Thread(target=revoke_after_two_days, daemon=True)
    revoker.start()
    run = cli("backfill", start, stop)
    revoker.join(timeout=5)

    assert run.code != 0, run
    stats = live.stats()
    assert 1 <= stats["bad_key_requests"] <= 4, stats  # at most the solves in flight, each once
    assert stats["ip_bans"] == 0 and not any("IP_BANNED" in c for c in stats["codes"].values())
    exported = {(d.name, p.stem) for d in (data_dir / "regions").iterdir() for p in d.glob("*.jsonl")}
    failed, codes = region_failures(run)
    everything = {(str(d), r) for d in days(start, stop) for r in REGIONS}
    assert len(exported) >= 8 and failed == everything - exported  # every region exported or failed
    assert codes == ["ERROR_KEY_DOES_NOT_EXIST"] * len(failed)
    submits_before = sum(stats["submits"].values())

    # A new key: its breaker is its own; the exported regions are not solved again.
    live.configure(valid_keys=frozenset({NEW_KEY}))
    done = cli("backfill", start, stop, CAPTCHAAI_API_KEY=NEW_KEY)
    assert done.code == 0, done
    assert_every_record_once(live, data_dir, days(start, stop))
    new_submits = sum(live.stats()["submits"].values()) - submits_before
    assert new_submits == len(everything - exported)

    # The old key stays blocked until the operator clears it: a new day fails at once, nothing sent.
    before = live.stats()
    blocked = cli("backfill", start, "2026-06-10", CAPTCHAAI_API_KEY=SANDBOX_KEY)
    assert blocked.code != 0
    after = live.stats()
    assert after["requests"] == before["requests"] and after["bad_key_requests"] == before["bad_key_requests"]
    failed, codes = region_failures(blocked)
    assert failed == {("2026-06-09", r) for r in REGIONS} and codes == ["ERROR_KEY_DOES_NOT_EXIST"] * 4
    assert len(breaker_files(data_dir)) == 1
    assert Path(KeyBreaker(LocalStore(data_dir), SANDBOX_KEY).location).exists()
