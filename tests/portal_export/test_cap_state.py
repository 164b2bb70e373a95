"""The deployment-wide state of the cap, on a local data dir and on a real object store (SeaweedFS):
runs' heartbeats, the marks of solves in flight, the gate's admission without a lock, the cap in
force, and the one owner of the cap (the lease). "Another host" is a run whose heartbeat names
another machine, which a test writes as that host's CLI would; its age on the store's clock is what
the test wants (`beat`: the store's listing, its times moved back by that age)."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from portal_export.errors import TransientError
from portal_export.gate import CapInForce, Gate
from portal_export.inflight import LOCAL_STEP_S, REMOTE_STEP_S, InFlight, Settle
from portal_export.lease import Lease
from portal_export.runs import Runs, current_run
from portal_export.state import pid_alive, store_now, this_host, zombie
from portal_export.store import LocalStore
from tests.helpers.speed import scaled

TTL = 10.0
OTHER = "other-host-4242-0badc0de"  # a run on another host: its pid means nothing here


def aged(store):
    """`store`, its listing's times of some keys moved back (`store.aged[key] = seconds`): how the
    store's clock shows an object written that long ago (an object store sets its own times)."""
    real = store.written
    store.aged = {}

    def written(prefix):
        times, now = real(prefix)
        return {key: t - store.aged.get(key, 0.0) for key, t in times.items()}, now

    store.written = written
    return store


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return aged(LocalStore(tmp_path / "data"))
    from tasks.s3store import S3Store

    return aged(S3Store(request.getfixturevalue("s3_data_dir")))


def beat(store, run, age=0.0, here=False, **fields):
    """`run`'s heartbeat as it wrote it `age` seconds ago (the store's clock), on another machine
    unless `here`."""
    Runs(store).beat(run, **fields)
    if not here:
        key = f"_state/runs/{run}.json"
        store.write(key, json.dumps({**json.loads(store.read(key)), "where": "another machine"}).encode())
    store.aged[f"_state/runs/{run}.json"] = age


def foreign_mark(store, run, pid=17, n=0):
    key = f"_state/inflight/{run}-{pid}-{n}"
    store.write(key, b"")
    return key


def dead_pid():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_the_remote_step_is_slower_than_the_local_one(store):
    assert InFlight(store).step_s == (LOCAL_STEP_S if isinstance(store, LocalStore) else REMOTE_STEP_S)
    assert REMOTE_STEP_S > LOCAL_STEP_S  # an object store is listed less often than a local disk


# ------------------------------------------------------------------------------------------ runs


def test_a_run_on_another_host_is_alive_while_its_heartbeat_is_younger_than_the_ttl(store):
    runs = Runs(store, ttl=TTL)
    assert not runs.alive(OTHER)  # never beat
    beat(store, OTHER, age=TTL - 2)
    assert runs.alive(OTHER)
    beat(store, OTHER, age=TTL + 1)
    assert not runs.alive(OTHER)  # its host stopped beating: dead for everyone
    beat(store, OTHER)
    runs.end(OTHER)
    assert not runs.alive(OTHER)  # a run that ended deleted its heartbeat


def test_a_run_on_this_host_is_alive_while_its_pid_is(store):
    """ "This host" is this boot and PID namespace, as the heartbeat says: not the hostname."""
    runs = Runs(store, ttl=TTL)
    me, gone = current_run(), f"{this_host()}-{dead_pid()}-0badc0de"
    beat(store, me, age=TTL * 5, here=True)  # a stale heartbeat, but a pid that lives: alive
    beat(store, gone, here=True)  # a fresh heartbeat, but its process is gone: dead at once
    assert runs.alive(me) and not runs.alive(gone)
    twin = f"{this_host()}-{dead_pid()}-1badc0de"  # this hostname, but another machine or container
    beat(store, twin)
    assert runs.alive(twin)  # its pid means nothing here: its heartbeat decides
    store.aged[f"_state/runs/{twin}.json"] = TTL + 1
    assert not runs.alive(twin, fresh=True)


def test_the_store_tells_a_heartbeats_age(store):
    """Ages on the store's own clock: the listing's times against the listing's own time now."""
    Runs(store).beat(OTHER)
    before = store_now(store)
    (age,) = Runs(store).ages().values()
    assert 0 <= age <= 2  # whole seconds on an object store
    while store_now(store) < before + 2:  # the store's clock moves on, whatever this host's does
        time.sleep(0.1)
    assert Runs(store).age(OTHER) >= 1


def test_live_runs_are_those_of_one_scheduler_and_dead_ones_are_deleted(store):
    beat(store, OTHER, key="k1")
    beat(store, "third-host-9-0badc0de", key="k2")
    beat(store, "dead-host-3-0badc0de", age=TTL + 1, key="k1")
    runs = Runs(store, ttl=TTL)
    assert runs.prune_dead("k1") == [OTHER]
    assert sorted(runs.prune_dead()) == sorted([OTHER, "third-host-9-0badc0de"])
    assert store.read("_state/runs/dead-host-3-0badc0de.json") is None


# ----------------------------------------------------------------------------------------- marks


def test_marks_count_over_hosts_while_their_runs_live(store):
    inflight = InFlight(store, Runs(store, ttl=TTL))
    beat(store, OTHER)
    beat(store, current_run(), here=True)
    foreign_mark(store, OTHER, n=0)
    foreign_mark(store, OTHER, n=1)
    with inflight.flight():
        assert inflight.count() == 3  # ours and the other host's two
    assert inflight.count() == 2


def test_a_mark_left_by_a_process_that_went_counts_until_its_solve_ends(store):
    """A dead host's solve and a killed task's: each counts until its deadline on the store's clock (`timeout_s` after
    the submit, `timeout_s + submit_s` without a task id) or until a poll, made once per `every_s`, says it ended."""
    asked = []
    answers = {"71": False}
    settle = Settle(timeout_s=100.0, submit_s=20.0, ended=lambda t: asked.append(t) or answers[t], every_s=0.0)
    inflight = InFlight(store, Runs(store, ttl=TTL), settle=settle)
    beat(store, "dead-host-5-0badc0de", age=TTL + 1)
    beat(store, current_run(), here=True)
    no_id = foreign_mark(store, "dead-host-5-0badc0de")  # died before its submit was answered
    killed = f"_state/inflight/{current_run()}-{dead_pid()}-0"  # a killed task of this run, polling task 71
    store.write(killed, json.dumps({"task": "71"}).encode())
    assert inflight.count() == 2 and asked == ["71"]  # CaptchaAI still works on 71
    store.aged[no_id] = 115.0
    assert inflight.count() == 2  # within 100 + 20 s of the mark
    store.aged[no_id] = 125.0
    assert inflight.count() == 1 and store.read(no_id) is None
    answers["71"] = True  # solved, or given up, at CaptchaAI
    assert inflight.count() == 0 and store.read(killed) is None and asked == ["71"] * 4


def test_a_left_task_is_polled_once_per_period_and_its_deadline_needs_no_poll(store):
    asked = []
    settle = Settle(timeout_s=100.0, ended=lambda t: asked.append(t) or False, every_s=60.0)
    inflight = InFlight(store, Runs(store, ttl=TTL), settle=settle)
    beat(store, current_run(), here=True)
    killed = f"_state/inflight/{current_run()}-{dead_pid()}-0"
    store.write(killed, json.dumps({"task": "72", "t": 0}).encode())
    assert [inflight.count() for _ in range(3)] == [1, 1, 1] and asked == ["72"]
    assert InFlight(store, settle=Settle(timeout_s=100.0)).count() == 1  # nobody to poll: it counts
    store.aged[killed] = 102.0  # its submit's deadline passed: ended, whatever a poll would say
    assert inflight.count() == 0 and asked == ["72"]


def test_a_stopped_solve_leaves_its_mark_once_its_task_exists(store):
    inflight = InFlight(store, Runs(store, ttl=TTL))
    for task in (None, "73"):
        with pytest.raises(KeyboardInterrupt), inflight.flight() as flight:
            if task is not None:
                flight.submitted(task)
            raise KeyboardInterrupt
    left = [store.read(k) for k in store.list("_state/inflight/")]
    assert len(left) == 1 and json.loads(left[0])["task"] == "73"  # the one without a task went at the stop
    with pytest.raises(TransientError), inflight.flight() as flight:  # the solve's own end: its task is over
        flight.submitted("74")
        raise TransientError("POLL_DEADLINE")
    assert len(store.list("_state/inflight/")) == 1


def test_a_poke_reaches_another_hosts_governor(store):
    InFlight(store, run=OTHER).poke()
    assert InFlight(store).last_poke() > time.time() - 5


# ------------------------------------------------------------------------------------- admission


def test_the_cap_in_force_holds_only_while_its_run_lives(store):
    """The cap in force holds while its owner's run does: from another host, its heartbeat younger
    than the TTL on the store's clock, whatever the file's stamp says; on this host, the owner's pid."""
    gate = Gate(store, configured=4, plan_every_s=0.5)  # TTL 10 s
    beat(store, OTHER)
    CapInForce(store).write(2, time.time(), OTHER)
    assert gate.cap() == 2

    def written(run, age, stamp=0.0):
        state = {"cap": 1, "read_at": 1.0, "run": run, "t": time.time() + stamp}
        store.write("_state/cap.json", json.dumps(state).encode())
        beat(store, run, age=age, here=run != OTHER)
        gate.inflight.runs.ages(fresh=True)

    written(OTHER, age=TTL - 2, stamp=-600)  # a clock 10 minutes behind: nothing to the verdict
    assert gate.cap() == 1
    written(OTHER, age=TTL + 1, stamp=+600)  # its host died (a clock 10 minutes ahead)
    assert gate.cap() == 4
    written(current_run(), age=TTL * 5)  # this host's owner, alive however old its heartbeat
    assert gate.cap() == 1
    written(f"{this_host()}-{dead_pid()}-0badc0de", age=0)  # this host's owner, killed a moment ago
    assert gate.cap() == 4


def test_the_gate_counts_other_hosts_solves(store):
    beat(store, OTHER)
    for n in range(3):
        foreign_mark(store, OTHER, n=n)
    refused = []  # the gate sleeps only after it counted and withdrew a solve
    gate = Gate(store, configured=4, plan_every_s=0.5, sleep=lambda s: (refused.append(s), time.sleep(s)))
    entered = threading.Event()

    def second():
        with gate.solving():
            entered.set()

    with gate.solving():  # the fourth of four
        waiter = threading.Thread(target=second)
        waiter.start()
        deadline = time.monotonic() + scaled(10)
        while not (refused or entered.is_set()):  # its first look at the gate, whatever the verdict
            assert time.monotonic() < deadline, "the second solve never looked at the gate"
            time.sleep(0.01)
        assert not entered.is_set()  # the other host's three and ours fill the cap
        store.delete(f"_state/inflight/{OTHER}-17-0")  # one of theirs ended
        assert entered.wait(3)
    waiter.join()
    assert gate.inflight.count() == 2


def most_at_once(intervals):
    """The most [start, end] intervals that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


RACE = (
    "import sys, time\n"
    "from portal_export.gate import Gate\n"
    "from tasks import targets\n"
    "gate = Gate(targets.store(), configured=8, plan_every_s=0.5)\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    with gate.solving():\n"
    "        start = time.time()\n"
    "        time.sleep(0.05)\n"
    "        print(start, time.time(), flush=True)\n"
)


def race(store, cap, processes, solves):
    """`processes` processes, `solves` solves each, under a cap of `cap`: the intervals they held."""
    import os

    beat(store, current_run(), here=True)
    CapInForce(store).write(cap, time.time(), current_run())
    where = str(store.root) if isinstance(store, LocalStore) else store.location("").rstrip("/")
    env = {**os.environ, "PORTAL_DATA_DIR": where, "PORTAL_EXPORT_RUN": current_run()}
    procs = [
        subprocess.Popen([sys.executable, "-c", RACE, str(solves)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(processes)
    ]
    lines = [line.split() for p in procs for line in p.communicate(timeout=120)[0].splitlines()]
    return [(float(a), float(b)) for a, b in lines]


@pytest.mark.unmeasured
def test_processes_racing_for_the_cap_never_pass_it(store):
    """Six processes, a cap of 2, solves of 50 ms: mark, list, withdraw when over. Marks of those
    still trying show in a count, so what is checked is the time each admitted solve held."""
    held = race(store, cap=2, processes=6, solves=3)
    assert len(held) == 18 and most_at_once(held) <= 2, sorted(held)
    assert InFlight(store).count() == 0


# ----------------------------------------------------------------------------------------- lease


def test_one_owner_at_a_time_and_a_dead_owners_lease_passes_on(store):
    runs = Runs(store, ttl=TTL)
    beat(store, OTHER)
    theirs = Lease(store, "k", runs, OTHER)
    mine = Lease(store, "k", runs, current_run())
    beat(store, current_run(), here=True)
    assert theirs.acquire() and theirs.gen == 1
    assert not mine.acquire()  # its holder beats
    assert mine.holder() == OTHER
    beat(store, OTHER, age=TTL + 1)  # the owner's host died
    assert mine.acquire() and mine.gen == 2 and mine.previous == OTHER
    assert not theirs.held()  # the old owner sees the newer generation at its next heartbeat: steps down
    assert mine.held() and mine.acquire()  # ours, and still ours


def test_of_contenders_for_a_dead_owners_lease_one_wins(store):
    runs = Runs(store, ttl=TTL)
    beat(store, "dead-host-5-0badc0de", age=TTL + 1)
    assert Lease(store, "k", runs, "dead-host-5-0badc0de").acquire()
    contenders = [f"host-{n}-{n}-0badc0de" for n in range(4)]
    for run in contenders:
        beat(store, run)
    leases = [Lease(store, "k", runs, run) for run in contenders]
    won = []
    start = threading.Barrier(len(leases))

    def contend(lease):
        start.wait()
        if lease.acquire():
            won.append(lease.run)

    threads = [threading.Thread(target=contend, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and Lease(store, "k", runs, "x-1").holder() == won[0]


# ------------------------------------------------------------------------------- the Luigi side


def test_a_run_takes_over_the_cap_of_an_owner_whose_host_died_and_says_whose(luigi_cfg, central, caplog):
    """Another host's run owns the cap, then its host dies: at a heartbeat after its heartbeat is
    past the TTL, this run's steward takes the lease (the next generation), sets the cap from then
    on, and says whose cap it took over and how long that run's heartbeat has been still."""
    import logging

    from ops.steward import Steward

    luigi_cfg("captchaai", "plan_every_s", 0.2)  # a heartbeat every 0.1 s
    caplog.set_level(logging.INFO)
    steward = Steward(central.url, follow=False)
    store = aged(steward.store)
    owner = "owner-host-5-0badc0de"
    beat(store, owner, key=steward.key)
    assert Lease(store, steward.key, Runs(store, ttl=steward.runs.ttl), owner).acquire()
    steward.start()
    try:
        assert not steward._owner  # the owner's heartbeat is fresh
        store.aged[f"_state/runs/{owner}.json"] = steward.runs.ttl + 30  # its host died
        said = rf"cap: run (\S+) took over the cap \(.*\): run {owner} that set it stopped its heartbeat (\S+) s"
        deadline = time.monotonic() + scaled(5)
        while not (took := re.search(said, caplog.text)):  # said once the lease is taken
            assert time.monotonic() < deadline, f"the dead owner's cap was not taken over: {caplog.text}"
            time.sleep(0.02)
        assert steward._owner and steward.lease.gen == 2 and steward.lease.previous == owner
        assert took.group(1) == steward.run and float(took.group(2)) >= steward.runs.ttl + 30
        assert {r["name"]: r["num_total"] for r in central.rpc("resource_list")}["captchaai"] == steward.configured
    finally:
        steward.stop()


def test_an_owner_that_finds_a_newer_generation_steps_down_and_leaves_the_cap_to_it(luigi_cfg, central, caplog):
    """The owner was taken for dead (its heartbeat stalled past the TTL) and another run took the
    lease: at its next heartbeat it stops setting luigid's cap, and at its end it leaves the cap to
    the run that lives (no restore while another run is alive)."""
    import json
    import logging

    from ops.steward import Steward

    luigi_cfg("captchaai", "plan_every_s", 0.2)  # a heartbeat every 0.1 s
    caplog.set_level(logging.INFO)
    steward = Steward(central.url, follow=False)
    steward.start()
    try:
        assert steward._owner and steward.lease.gen == 1
        heir = "other-host-9-0badc0de"
        beat(aged(steward.store), heir, key=steward.key)
        claim = json.dumps({"run": heir, "t": time.time()}).encode()
        assert steward.store.create(f"_state/governor/{steward.key}/00000002.json", claim)
        deadline = time.monotonic() + scaled(5)
        while steward._owner:
            assert time.monotonic() < deadline, "the owner did not step down"
            time.sleep(0.02)
        assert f"cap: run {heir} took the cap over" in caplog.text
        assert steward._lend_stop.is_set() and steward.governor is None  # it lends no more slots
        steward._lender.join(timeout=2)
        assert not steward._lender.is_alive()
        central.rpc("update_resource", resource="captchaai", amount=2)  # the heir sets the cap now
    finally:
        steward.stop()
    assert Runs(steward.store).prune_dead(steward.key) == [heir]  # its own heartbeat went with it
    # another run lives: nothing restored (this steward keeps the configured cap, 4, when it restores)
    assert {r["name"]: r["num_total"] for r in central.rpc("resource_list")}["captchaai"] == 2


def test_a_process_that_ended_unreaped_is_no_live_one():
    """A container's init may never reap a killed run's task processes: a zombie's solve is no solve in flight."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie once it ends
    try:
        deadline = time.monotonic() + scaled(10)
        while not zombie(child.pid):
            assert time.monotonic() < deadline, "the child never ended"
            time.sleep(0.01)
        assert not pid_alive(child.pid)
        assert pid_alive(os.getpid())
    finally:
        child.wait()
