"""The cap that follows the plan, without Luigi: the pure decision, the loop on a fake clock, the
shared count of solves in flight, the cap log, and the client's part (counting, asking for a reading)."""

import os
import subprocess
import sys
import time

import pytest
import responses

from portal_export.caplog import CapLog, seconds_below
from portal_export.captchaai import CaptchaAI
from portal_export.errors import TransientError
from portal_export.governor import ZERO_CAP_PERIODS, Governor, Reading, decide, target_cap
from portal_export.inflight import InFlight
from portal_export.runs import current_run
from portal_export.store import LocalStore

CAP, SPARE = 4, 1


def step(reading, current, proposed=None):
    return decide(CAP, SPARE, reading, current, proposed)


# ------------------------------------------------------------------------------------------ decide


def test_another_consumer_lowers_the_cap_at_once_with_its_reason():
    d = step(Reading(threads=5, working=4, own=2), current=4)
    assert (d.cap, d.reason) == (2, "another consumer holds 2 of 5 plan threads")


def test_own_solves_are_not_another_consumers_share():
    assert step(Reading(5, 4, own=4), current=4).cap == 4
    assert Reading(5, 3, own=4).others == 0  # a solve counted before its submit reached the service


def test_solves_starting_or_ending_around_a_reading_move_nothing():
    # Two of ours were seen in only one of the counts around the reading: others hold 1 to 3.
    shaky = Reading(5, 4, own=3, steady=1)
    assert (shaky.others, shaky.others_at_most) == (1, 3)
    assert step(shaky, current=3).cap == 3  # not lowered: others may hold only 1
    assert step(shaky, current=1, proposed=3).cap == 1  # not raised: others may hold 3
    assert step(Reading(5, 4, own=1, steady=1), current=3).cap == 1  # lowered once sure


def test_a_rise_needs_two_readings_that_allow_it_and_takes_the_lower():
    free = Reading(5, 0, 0)
    first = step(free, current=2)
    assert (first.cap, first.target) == (2, 4)  # one reading: no rise yet
    assert step(free, current=2, proposed=first.target).cap == 4
    assert step(free, current=2, proposed=3).cap == 3
    assert step(free, current=2, proposed=2).cap == 2  # the previous reading did not allow a rise


def test_a_full_reading_says_at_least_and_never_raises():
    full = Reading(5, 5, own=1)  # others hold at least 4
    assert step(full, current=0, proposed=4).cap == 0
    d = step(full, current=4)
    assert d.cap == 0 and d.reason == "all 5 plan threads busy, another consumer holds at least 4"


def test_never_above_the_configured_cap_and_a_smaller_plan_lowers_it():
    assert target_cap(CAP, SPARE, Reading(15, 0, 0)) == 4
    d = step(Reading(3, 0, 0), current=4)
    assert (d.cap, d.reason) == (2, "the plan has 3 threads, 1 kept spare")
    assert step(Reading(1, 0, 0), current=4).cap == 0  # one thread, kept spare: nothing usable


# ------------------------------------------------------------------------------------- the loop


class FakePlan:
    def __init__(self, *readings):
        self.readings = list(readings)
        self.calls = 0

    def threads(self):
        self.calls += 1
        answer = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeSignals:
    def __init__(self, own=0):
        self.own = own
        self.poked = 0.0
        self.asked = 0  # times the last poke was looked up

    def prune_dead(self):
        return {f"1-{n}" for n in range(self.own)}

    def last_poke(self):
        self.asked += 1
        return self.poked


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def governor(plan, signals=None, clock=None):
    changes, verdicts = [], []
    gov = Governor(
        plan,
        signals or FakeSignals(),
        configured=CAP,
        spare=SPARE,
        every_s=30.0,
        set_cap=lambda n, why: changes.append((n, why)),
        blocked=verdicts.append,
        clock=clock or Clock(),
    )
    return gov, changes, verdicts


def test_the_loop_sets_the_first_cap_then_only_changes():
    gov, changes, _ = governor(FakePlan((5, 0), (5, 2), (5, 2), (5, 0), (5, 0)))
    for _ in range(5):
        gov.read()
    assert [n for n, _ in changes] == [4, 2, 4]  # start; another consumer takes 2; gone for two readings
    assert changes[1][1] == "another consumer holds 2 of 5 plan threads"


def test_readings_come_every_half_period_while_the_cap_is_low():
    gov, _, _ = governor(FakePlan((5, 2), (5, 0)))
    gov.read()
    assert gov.period() == 15.0  # two readings to rise, still within one period
    gov.read()
    gov.read()
    assert gov.cap == 4 and gov.period() == 30.0


def test_no_answer_keeps_the_cap():
    gov, changes, _ = governor(FakePlan((5, 2), TransientError("HTTP_502"), (5, 2)))
    gov.read()
    assert gov.read() is None and gov.cap == 2
    gov.read()
    assert [n for n, _ in changes] == [2]


def test_zero_usable_threads_past_the_deadline_is_a_verdict_and_it_lifts_when_threads_free():
    clock = Clock()
    gov, changes, verdicts = governor(FakePlan((5, 5)), clock=clock)
    gov.read()
    assert changes == [(0, "another consumer holds all 5 plan threads")]
    clock.now = ZERO_CAP_PERIODS * 30.0 - 1
    gov.read()
    assert verdicts == []
    clock.now += 1
    gov.read()
    assert (
        len(verdicts) == 1
        and verdicts[0] == "no plan thread usable for 600 s: another consumer holds all 5 plan threads"
    )
    gov.plan.readings = [(5, 0)]
    gov.read()
    gov.read()
    assert gov.cap == 4 and verdicts[-1] is None


def test_a_poke_reads_at_once_and_forbids_a_rise_on_that_reading():
    signals = FakeSignals()
    plan = FakePlan((5, 2), (5, 0))
    gov, changes, _ = governor(plan, signals)
    gov.every_s = 5.0  # real seconds: the loop runs in a thread here
    applied = []
    gov.on_read = lambda cap: applied.append(cap) if plan.calls >= 2 else None  # the poked reading, decided
    gov.read()  # another consumer holds 2: cap 2
    gov.start(seen=(5, 0))  # a reading that allows 4: the next one that allows it too would raise the cap
    try:
        for _ in range(500):  # the loop runs, from the last poke as it stood
            if signals.asked:
                break
            time.sleep(0.01)
        signals.poked = 1.0
        for _ in range(100):
            if applied:
                break
            time.sleep(0.01)
        assert applied  # read at once, not after 2.5 s
        assert gov.cap == 2 and [n for n, _ in changes] == [2]  # the reading after a refusal does not raise
    finally:
        gov.stop()


# ------------------------------------------------------------------------------- shared state


def test_solves_in_flight_are_counted_across_processes_and_ended_ones_are_dropped(tmp_path):
    inflight = InFlight(LocalStore(tmp_path))
    assert inflight.count() == 0
    with inflight.flight(), inflight.flight():
        assert inflight.count() == 2
    assert inflight.count() == 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = tmp_path / "_state" / "inflight" / f"{current_run()}-{int(dead.stdout)}-0"
    killed.touch()  # a killed task's mark: its submit may have made a task, which holds a thread
    assert inflight.count() == 1
    os.utime(killed, (time.time() - 151, time.time() - 151))  # past timeout_s + submit_s of the defaults
    assert inflight.count() == 0 and list((tmp_path / "_state" / "inflight").iterdir()) == []


def test_a_poke_moves_last_poke(tmp_path):
    inflight = InFlight(LocalStore(tmp_path))
    assert inflight.last_poke() == 0.0
    inflight.poke()
    assert inflight.last_poke() > 0


def test_seconds_below_the_configured_cap():
    changes = [
        {"t": 10.0, "cap": 4, "configured": 4, "reason": ""},
        {"t": 20.0, "cap": 2, "configured": 4, "reason": ""},
        {"t": 30.0, "cap": 3, "configured": 4, "reason": ""},
        {"t": 40.0, "cap": 4, "configured": 4, "reason": ""},
        {"t": 50.0, "cap": 0, "configured": 4, "reason": ""},
    ]
    assert seconds_below(changes, 0.0, 45.0) == 20.0
    assert seconds_below(changes, 25.0, 35.0) == 10.0
    assert seconds_below(changes, 45.0, 60.0) == 10.0  # still below at the end
    assert seconds_below(changes, 0.0, 15.0) == 0.0
    assert seconds_below([], 0.0, 100.0) == 0.0


def test_cap_log_notes_and_the_busy_verdict(tmp_path):
    log = CapLog(LocalStore(tmp_path))
    assert log.last() is None and log.busy() is None
    log.note(2, 4, "another consumer holds 2 of 5 plan threads", "host-a-7")
    assert (
        log.last()["cap"] == 2
        and log.last()["run"] == "host-a-7"
        and log.last()["reason"] == "another consumer holds 2 of 5 plan threads"
    )
    log.set_busy("no plan thread usable for 600 s")
    assert log.busy()["reason"] == "no plan thread usable for 600 s"
    log.set_busy(None)
    assert log.busy() is None


# ------------------------------------------------------------------------------- the client's part

API = "https://ocr.test"
KEY = "k3y-0123456789abcdef0123456789ab"


@pytest.fixture
def rsps():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def test_a_solve_counts_from_before_its_submit_to_its_last_poll(rsps, tmp_path):
    inflight = InFlight(LocalStore(tmp_path))
    seen = []

    def submit(request):
        seen.append(("submit", inflight.count()))
        return 200, {}, '{"status": 1, "request": "42"}'

    def poll(request):
        seen.append(("poll", inflight.count()))
        return 200, {}, '{"status": 1, "request": "tok"}'

    rsps.add_callback(responses.POST, f"{API}/in.php", callback=submit)
    rsps.add_callback(responses.POST, f"{API}/res.php", callback=poll)
    client = CaptchaAI(KEY, API, first_poll_s=0, inflight=inflight, sleep=lambda s: None)
    assert client.solve({"googlekey": "g", "pageurl": "https://p.test/"}).token == "tok"
    assert seen == [("submit", 1), ("poll", 1)] and inflight.count() == 0


def test_a_submit_refused_for_busy_threads_asks_for_a_reading_and_stops_counting(rsps, tmp_path):
    inflight = InFlight(LocalStore(tmp_path))
    rsps.add(responses.POST, f"{API}/in.php", json={"status": 0, "request": "ERROR_ZERO_BALANCE"})
    rsps.add(responses.POST, f"{API}/res.php", json={"threads": "5", "working_threads": 5})
    client = CaptchaAI(KEY, API, inflight=inflight, sleep=lambda s: None)
    with pytest.raises(TransientError):
        client.solve({"googlekey": "g", "pageurl": "https://p.test/"})
    assert inflight.last_poke() > 0 and inflight.count() == 0
