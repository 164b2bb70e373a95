"""`make backfill START STOP`: exactly [START, STOP), however old START and however many days;
TASK_LIMIT and NEWEST_FIRST; complete days untouched; a final check that names what is missing.

Each day is one region (north), so one solve, and the sandbox runs at a hundredth of real time.
"""

import datetime
import os
import subprocess
import sys
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import pytest

from ops.cli import main
from tests import ROOT

NORTH = {"portal": {"regions": "north"}}


def utc_today():
    return datetime.datetime.now(datetime.timezone.utc).date()


def days_of(start, stop):
    return [start + datetime.timedelta(days=i) for i in range((stop - start).days)]


def day_files(data_dir, day):
    return [
        data_dir / f"portal_records_{day}.jsonl",
        data_dir / f"portal_records_{day}.health.json",
        data_dir / "regions" / str(day) / "north.jsonl",
    ]


def exported_days(data_dir):
    return {
        datetime.date.fromisoformat(p.name[len("portal_records_") : -len(".jsonl")])
        for p in data_dir.glob("portal_records_*.jsonl")
    }


def submits_by_day(sb):
    """CaptchaAI tasks the sandbox received, per day of the export page they were for."""
    return Counter(datetime.date.fromisoformat(parse_qs(urlsplit(t["pageurl"]).query)["day"][0]) for t in sb.tasks())


@pytest.mark.unmeasured
def test_an_old_start_and_a_long_range_cover_exactly_the_range(live, fast_cfg, cli, data_dir):
    """RangeDaily alone would clip START to 100 days back and schedule 50 days, then exit 0."""
    fast_cfg(NORTH)
    today = utc_today()
    start, stop = today - datetime.timedelta(days=110), today - datetime.timedelta(days=50)
    days = days_of(start, stop)
    assert len(days) == 60

    run = cli("backfill", start, stop)

    assert run.code == 0, run.err[-3000:]
    assert f"backfill {days[0]}..{days[-1]}: all 60 days complete" in run.err
    assert "Warning" not in run.err, run.err  # a normal run's log holds no Python warning (Luigi's param_name)
    assert exported_days(data_dir) == set(days)  # every day of the range, and none outside it
    for day in days:
        assert all(p.exists() for p in day_files(data_dir, day)), day
    assert submits_by_day(live) == {day: 1 for day in days}  # one solve per day: nothing twice


@pytest.mark.unmeasured
def test_task_limit_newest_first_leaves_days_missing_and_names_them_then_a_rerun_touches_no_complete_day(
    live, fast_cfg, data_dir
):
    """Through make, with the contract's variables; STOP = today, which is exclusive."""
    fast_cfg(NORTH)
    today = utc_today()
    start = today - datetime.timedelta(days=5)
    days = days_of(start, today)

    def make_backfill(*extra):
        return subprocess.run(
            ["make", "-s", "-C", str(ROOT), "backfill", f"START={start}", f"STOP={today}", *extra],
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=60,
        )

    limited = make_backfill("TASK_LIMIT=2", "NEWEST_FIRST=1")

    assert limited.returncode != 0
    newest, oldest = days[-2:], days[:-2]
    assert exported_days(data_dir) == set(newest)
    assert f"backfill {days[0]}..{days[-1]}: 3 of 5 days missing" in limited.stderr
    assert f"- north NOT_RUN (3 days):\n  {', '.join(map(str, oldest))}\n" in limited.stderr
    done = {p: p.stat().st_mtime_ns for day in newest for p in day_files(data_dir, day)}
    assert submits_by_day(live) == {day: 1 for day in newest}

    rerun = make_backfill()

    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert exported_days(data_dir) == set(days)  # never today, nor a day in the future
    assert submits_by_day(live) == {day: 1 for day in days}  # no new solve for the complete days
    assert {p: p.stat().st_mtime_ns for p in done} == done  # and none of their files rewritten


def test_days_that_fail_validation_make_the_backfill_fail_and_are_named(live, fast_cfg, cli, data_dir):
    """SCHEDULER=auto without a central scheduler runs locally and says so."""
    fast_cfg(NORTH)
    live.configure(unsolvable_sitekeys=frozenset({"north"}))  # 1 of 1 regions unsolvable: above 0.25
    start = utc_today() - datetime.timedelta(days=30)
    stop = start + datetime.timedelta(days=2)

    run = cli("backfill", start, stop, SCHEDULER="auto", LUIGI_SCHEDULER_URL="http://127.0.0.1:9")

    assert run.code == 30, run.err[-3000:]  # [retcode] task_failed
    assert "scheduler: local (no central scheduler answers at http://127.0.0.1:9)" in run.err
    second = start + datetime.timedelta(days=1)
    assert f"backfill {start}..{second}: 2 of 2 days missing" in run.err
    assert f"- {start}: unsolvable ratio 1.00 (north)\n- {second}: unsolvable ratio 1.00 (north)\n" in run.err
    assert exported_days(data_dir) == set()


def test_a_stop_in_the_future_or_a_zero_task_limit_is_refused_before_any_request(monkeypatch, capsys):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", "k" * 32)
    monkeypatch.setenv("CAPTCHAAI_API_BASE", "http://127.0.0.1:9")  # nothing listens: a request would fail
    today = utc_today()
    assert main(["backfill", str(today - datetime.timedelta(days=3)), str(today + datetime.timedelta(days=2))]) == 2
    assert "is in the future" in capsys.readouterr().err
    assert main(["backfill", str(today - datetime.timedelta(days=3)), str(today), "--task-limit", "0"]) == 2
    assert capsys.readouterr().err == "error: TASK_LIMIT=0: give at least 1\n"
