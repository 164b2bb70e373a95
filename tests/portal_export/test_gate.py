"""Waiting costs nothing, without a live run: the gate admits solves under the cap in force across
processes, a busy refusal waits (marked as waiting) for a fresh reading and spends no attempt, the
PLAN_BUSY deadline bounds it, and the scheduler's total is the cap plus the regions that wait."""

import subprocess
import sys
import threading
import time
import types

import luigi.scheduler
import pytest
import responses

from portal_export.caplog import CapLog
from portal_export.captchaai import CaptchaAI
from portal_export.errors import BusyThreads, PermanentError, TransientError
from portal_export.gate import CapInForce, Gate, Waiting
from portal_export.governor import ZERO_CAP_PERIODS
from portal_export.runs import Runs, current_run
from portal_export.state import this_host
from portal_export.store import LocalStore
from tests.helpers.runs import wait_for
from tests.helpers.speed import scaled

API = "https://ocr.test"
KEY = "k3y-0123456789abcdef0123456789ab"
PARAMS = {"googlekey": "g", "pageurl": "https://p.test/"}


def dead_pid():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def set_cap(where, cap, read_at):
    """The cap in force, as a live run (this process, beating) writes it."""
    store = LocalStore(where)
    Runs(store).beat(current_run())
    CapInForce(store).write(cap, read_at, current_run())


class Clock:
    """A fake wall clock that a fake sleep moves."""

    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


# ------------------------------------------------------------------------------------ the cap in force


def test_the_cap_in_force_is_the_live_runs_file_else_the_configured_cap(tmp_path):
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=1.0)
    assert gate.cap() == 4  # nobody follows the plan
    set_cap(tmp_path, 2, time.time())
    assert gate.cap() == 2
    killed = f"{this_host()}-{dead_pid()}-0badc0de"
    Runs(LocalStore(tmp_path)).beat(killed)  # on this machine: its pid tells
    (tmp_path / "_state" / "cap.json").write_text(
        f'{{"cap": 0, "read_at": 1.0, "run": "{killed}", "t": {time.time()}}}'
    )
    assert gate.cap() == 4  # a killed run's cap holds nobody back
    (tmp_path / "_state" / "cap.json").write_text("{not json")
    assert gate.cap() == 4


def test_a_stop_while_the_gate_counts_the_others_leaves_no_mark(tmp_path, monkeypatch):
    """SIGTERM (KeyboardInterrupt, ops/stopping.py) while the gate counts the others' marks, a listing that can take
    seconds on a loaded store: a mark left without a task would hold a slot for the submit's deadline and more."""
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=1.0)
    marks = tmp_path / "_state" / "inflight"

    def stopped():
        assert len(list(marks.glob("*"))) == 1  # its own mark is written when the stop comes
        raise KeyboardInterrupt

    monkeypatch.setattr(gate.inflight, "count", stopped)
    with pytest.raises(KeyboardInterrupt), gate.solving():
        pass
    assert not list(marks.glob("*"))


def test_the_gate_admits_solves_only_below_the_cap_and_the_next_one_when_a_solve_ends(tmp_path):
    set_cap(tmp_path, 2, time.time())
    refused = []  # the gate sleeps only after it counted and withdrew a solve
    gate = Gate(
        LocalStore(tmp_path), configured=4, plan_every_s=1.0, sleep=lambda s: (refused.append(s), time.sleep(s))
    )
    entered = threading.Event()

    def third():
        with gate.solving():
            entered.set()

    with gate.solving():
        with gate.solving():
            assert gate.inflight.count() == 2
            waiter = threading.Thread(target=third)
            waiter.start()
            deadline = time.monotonic() + scaled(10)
            while not (refused or entered.is_set()):  # its first look at the gate, whatever the verdict
                assert time.monotonic() < deadline, "the third solve never looked at the gate"
                time.sleep(0.005)
            assert not entered.is_set()  # at the cap: it waits
        assert entered.wait(2)  # one ended: admitted
    waiter.join()
    assert gate.inflight.count() == 0


def test_a_busy_verdict_stops_a_solve_waiting_at_the_gate_with_plan_busy(tmp_path):
    set_cap(tmp_path, 0, time.time())
    CapLog(LocalStore(tmp_path)).set_busy("no plan thread usable for 600 s: another consumer holds all 5 plan threads")
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=1.0)
    with pytest.raises(PermanentError) as info, gate.solving():
        pass
    assert info.value.code == "PLAN_BUSY"
    assert "another consumer holds all 5 plan threads" in str(info.value)


# ------------------------------------------------------------------------------------- a busy refusal


@pytest.mark.parametrize("owner_clock_s", [0, -600])
def test_after_a_refusal_the_solve_waits_marked_as_waiting_for_a_reading_made_after_it(tmp_path, owner_clock_s):
    """A reading after the refusal is one published after it, whatever the owner's clock says
    (-600: the owner's host is 10 minutes behind this one's)."""
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=5.0)
    set_cap(tmp_path, 4, time.time() + owner_clock_s - 5)  # a reading from before the refusal
    seen = []

    def reading_later():
        time.sleep(0.2)
        seen.append(Waiting(LocalStore(tmp_path)).count())
        set_cap(tmp_path, 2, time.time() + owner_clock_s)

    reader = threading.Thread(target=reading_later)
    reader.start()
    started = time.monotonic()
    gate.after_refusal(time.time(), "all 5 plan threads busy")
    waited = time.monotonic() - started
    reader.join()
    assert seen == [1]  # waiting (its slot lent) while it waited
    assert 0.15 < waited < 2.5  # until the new reading (0.2 s), not a whole period (5 s)
    assert Waiting(LocalStore(tmp_path)).count() == 0


def test_with_nobody_reading_the_plan_a_refusal_waits_one_period(tmp_path):
    clock = Clock()
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=3.0, clock=clock, sleep=clock.sleep)
    gate.after_refusal(clock(), "all 5 plan threads busy")
    assert clock() == pytest.approx(1003.0, abs=0.05)


def test_under_a_fixed_cap_a_refused_region_keeps_its_slot(tmp_path):
    """Nobody lowers the cap: a region started in the lent slot would only be refused as well."""
    seen = []
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=0.2, follows_plan=False)
    gate.sleep = lambda s: (seen.append(gate.waiting.count()), time.sleep(s))
    gate.after_refusal(time.time(), "all 5 plan threads busy")
    assert seen and set(seen) == {0}


def test_under_a_fixed_cap_a_refusal_reads_the_plan_until_a_thread_is_free(tmp_path):
    """Nobody follows the plan: the wait reads it every `every_s`, an unanswered reading frees nothing."""
    clock = Clock()
    gate = Gate(
        LocalStore(tmp_path), configured=4, plan_every_s=60.0, follows_plan=False, clock=clock, sleep=clock.sleep
    )
    answers = [TransientError("NETWORK_ERROR"), (5, 5), (5, 4), (5, 0)]

    def plan():
        if isinstance(answer := answers.pop(0), Exception):
            raise answer
        return answer

    gate.after_refusal(clock(), "all 5 plan threads busy", plan, every_s=5.0)
    assert answers == [(5, 0)] and clock() == pytest.approx(1015.0, abs=0.5)


def test_refusals_in_a_row_for_twenty_plan_periods_fail_with_plan_busy(tmp_path):
    clock = Clock()
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=3.0, clock=clock, sleep=clock.sleep)
    since = clock()
    for _ in range(ZERO_CAP_PERIODS - 1):
        gate.after_refusal(since, "all 5 plan threads busy")
    with pytest.raises(PermanentError) as info:
        gate.after_refusal(since, "all 5 plan threads busy")
    assert info.value.code == "PLAN_BUSY"
    assert str(info.value).startswith("PLAN_BUSY: no plan thread usable for 60 s: all 5 plan threads busy")
    assert clock() - since == pytest.approx(ZERO_CAP_PERIODS * 3.0, abs=0.05)


@pytest.fixture
def rsps():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def test_a_client_with_a_gate_waits_out_a_busy_refusal_and_submits_again(rsps, tmp_path):
    clock = Clock()
    gate = Gate(LocalStore(tmp_path), configured=4, plan_every_s=3.0, clock=clock, sleep=clock.sleep)
    rsps.add(responses.POST, f"{API}/in.php", json={"status": 0, "request": "ERROR_ZERO_BALANCE"})
    rsps.add(responses.POST, f"{API}/in.php", json={"status": 1, "request": "42"})
    rsps.add(responses.POST, f"{API}/res.php", json={"threads": "5", "working_threads": 5})
    rsps.add(responses.POST, f"{API}/res.php", json={"status": 1, "request": "tok"})
    client = CaptchaAI(KEY, API, first_poll_s=0, gate=gate, sleep=lambda s: None)
    solve = client.solve(PARAMS)
    assert (solve.token, solve.task_id, client.busy_waits) == ("tok", "42", 1)
    assert gate.inflight.last_poke() > 0  # the refusal asked the governor for a reading
    assert clock() == pytest.approx(1003.0, abs=0.05)  # one period: nobody followed the plan
    assert gate.inflight.count() == 0 and gate.waiting.count() == 0


def test_without_a_gate_a_busy_refusal_is_still_an_error(rsps, tmp_path):
    rsps.add(responses.POST, f"{API}/in.php", json={"status": 0, "request": "ERROR_ZERO_BALANCE"})
    rsps.add(responses.POST, f"{API}/res.php", json={"threads": "5", "working_threads": 5})
    with pytest.raises(BusyThreads):
        CaptchaAI(KEY, API, sleep=lambda s: None).solve(PARAMS)


def test_a_backoff_sleeps_as_a_region_that_waits(tmp_path):
    waiting = Waiting(LocalStore(tmp_path))
    seen = []
    sleeper = threading.Thread(target=waiting.sleep, args=(0.3,))
    sleeper.start()
    time.sleep(0.1)
    seen.append(waiting.count())
    sleeper.join()
    assert seen == [1] and waiting.count() == 0


# ------------------------------------------------------------------------ the scheduler's total (Luigi)


def test_the_local_schedulers_total_is_the_cap_plus_the_regions_that_wait(luigi_cfg, tmp_path):
    from ops.steward import Steward
    from tasks.config import RESOURCE

    luigi_cfg("resources", "captchaai", 4)
    luigi_cfg("captchaai", "follow_plan", "false")
    steward = Steward(None, follow=False)
    scheduler = luigi.scheduler.Scheduler()
    steward.local.attach(scheduler)
    worker = types.SimpleNamespace(worker_processes=8)  # [core] workers = 8
    steward.workers.attach(worker, 8)
    steward.start()

    def total():
        return scheduler.resources().get(RESOURCE, {}).get("total")

    def slots(n):
        wait_for(lambda: total() == n, f"{n} slots of the scheduler's {RESOURCE}", timeout=2, every=0.01)

    try:
        slots(4)
        assert worker.worker_processes == 4  # a process per slot: no idle polling of the scheduler
        waiting = Waiting(steward.store)
        with waiting.marked(), waiting.marked():
            slots(6)  # two regions in backoff lend their slots
            assert worker.worker_processes == 6
            with waiting.marked(), waiting.marked():
                slots(8)
                assert worker.worker_processes == 8  # never above [core] workers
        slots(4)
        assert worker.worker_processes == 4
    finally:
        steward.stop()
