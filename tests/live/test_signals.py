"""A run stopped on purpose (docs/operations.md "Stopping a run"): SIGTERM (systemd, kill, a
timeout) or Ctrl-C (SIGINT to the terminal's process group) ends it within 10 s, also when luigid
has stopped answering, with no CaptchaAI submit after the signal and nothing left in the data dir or
on luigid that a rerun must wait out. The real CLI against the sandbox and luigid itself.
"""

import json
import os
import pickle
import re
import signal
import subprocess
import time

import pytest

from tests.helpers.cfg import polls
from tests.helpers.runs import Luigid
from tests.helpers.speed import scaled

STOP_WITHIN_S = scaled(10)
DAYS = ("2026-06-01", "2026-06-11")  # ten days of one region: ten solves of a second each, four at a time
SOLVE_S = 1.0
LATE_S = scaled(0.5)  # a request sent just before the signal may reach the sandbox this much later


def solving(live, fast_cfg, solve_s):
    # the solves' deadline scaled: a rerun that a loaded machine starts late still finds the solves a
    # stopped run left within it, and polls them rather than letting them go as past it
    fast_cfg({"portal": {"regions": "north"}, "captchaai": {**polls(solve_s), "timeout_s": scaled(3 * solve_s)}})
    live.configure(solve_s=solve_s / live.config.time_scale)
    return live


@pytest.fixture
def slow(live, fast_cfg):
    """Solves of a second, one region: the run is mid-way for seconds, with solves in flight."""
    return solving(live, fast_cfg, SOLVE_S)


@pytest.fixture
def slower(live, fast_cfg):
    """Solves of four seconds: still in flight after a second of a frozen luigid."""
    return solving(live, fast_cfg, 4 * SOLVE_S)


def start(cli, *argv, **env):
    """The run in a process group of its own, as a terminal or a service manager starts it."""
    return cli.start(*argv, own_group=True, **env)


def mid_run(cli, proc, live):
    """Wait until the run has finished a day and has solves in flight."""
    deadline = time.monotonic() + scaled(30)
    while not (re.search(r"^day \S+ done", cli.output(proc)[1], re.M) and pending(live)):
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)
        time.sleep(0.05)


def paused_mid_run(cli, proc, live):
    """mid_run, then the sandbox's clock stopped with solves still in flight: they stay so until resume_clock()."""
    while True:
        mid_run(cli, proc, live)
        live.pause_clock()
        if pending(live):
            return
        live.resume_clock()


def pending(live):
    return [t for t in live.tasks() if t["status"] == "pending"]


def stop(proc, how):
    """SIGTERM to the run's process (as `kill`), or Ctrl-C: SIGINT to its process group (as a terminal)."""
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)


def assert_stopped(cli, proc, live, data_dir, signalled_at, sent_at, how):
    time.sleep(max(0.0, sent_at + LATE_S - time.monotonic()))
    polled = {t["id"]: t["polls"] for t in live.tasks()}
    try:
        code = proc.wait(timeout=STOP_WITHIN_S - (time.monotonic() - sent_at))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run still runs {STOP_WITHIN_S} s after {how}: {cli.output(proc)[1][-3000:]}")
    err = cli.output(proc)[1]
    name, expected = ("interrupted", 130) if how == "ctrl-c" else ("stopped by SIGTERM", 143)
    assert code == expected, err
    assert err.rstrip().splitlines()[-1] == (
        f"backfill: {name}; every day written is whole, the same command again finishes the rest"
    )
    assert "Traceback" not in err, err
    late = [t for t in live.tasks() if t["submit_t"] > signalled_at + LATE_S]
    assert late == [], (signalled_at, late)
    # the solves in flight are abandoned at once (CaptchaAI has no cancel), while the run winds down
    assert {t["id"]: t["polls"] for t in live.tasks()} == polled
    # nothing claims the run still goes; what counts against the cap is the solves CaptchaAI still works on, each
    # mark naming its task: every task pending at the signal, and none whose token was taken
    state = data_dir / "_state"
    assert not list((state / "runs").glob("*")) and not list((state / "waiting").glob("*"))
    left = {json.loads(p.read_text())["task"] for p in (state / "inflight").glob("*")}
    tasks = live.tasks()
    # (a submit whose answer was still on its way at the signal is the one exception: its process never read the
    # task id, and its mark went at the stop, as one without a task does)
    answered = {t["id"] for t in tasks if t["ready_t"] > signalled_at and t["submit_t"] < signalled_at - LATE_S}
    assert answered <= left <= {t["id"] for t in tasks if not t["token_accepted"]}, (left, tasks)
    return err, left


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_run_whose_luigid_stopped_ends_within_10_s_of_the_signal(slow, cli, data_dir, tmp_path, how):
    """luigid stopped mid-backfill: Luigi's RPCs would retry for minutes (3 x 30 s, each) before the run ends."""
    central = Luigid(tmp_path / "luigid")
    try:
        proc = start(cli, "backfill", *DAYS, **central.env)
        mid_run(cli, proc, slow)
    finally:
        central.proc.kill()  # gone at once: nothing answers on its port any more
        central.proc.wait()
    time.sleep(1.0)  # the worker's RPCs fail and wait to be retried
    assert proc.poll() is None, cli.output(proc)
    signalled_at, sent_at = slow.now(), time.monotonic()
    stop(proc, how)
    assert_stopped(cli, proc, slow, data_dir, signalled_at, sent_at, how)


@pytest.mark.unmeasured
def test_a_run_stopped_by_sigterm_hands_its_tasks_back_and_a_rerun_finishes_at_once(slow, cli, data_dir, tmp_path):
    """luigid still answers: the stopped run's running tasks are pending again, so the same command
    runs them at once, rather than waiting for luigid to take the worker for dead (60 s) and retry_delay."""
    central = Luigid(tmp_path / "luigid")
    try:
        proc = start(cli, "backfill", *DAYS, **central.env)
        mid_run(cli, proc, slow)
        signalled_at, sent_at = slow.now(), time.monotonic()
        stop(proc, "sigterm")
        _, left = assert_stopped(cli, proc, slow, data_dir, signalled_at, sent_at, "sigterm")
        assert left  # stopped mid-solve (mid_run)
        assert central.task_list("RUNNING") == {} and central.task_list("DISABLED") == {}
        # CaptchaAI has no cancel: the solves it abandoned hold plan threads until they end (a second here), and
        # their marks count against the cap till then; the rerun polls them, finds them ended, and takes their slots
        while pending(slow):
            time.sleep(0.05)
        assert {json.loads(p.read_text())["task"] for p in (data_dir / "_state" / "inflight").glob("*")} == left

        rerun = cli("backfill", *DAYS, timeout=30, **central.env)
    finally:
        central.stop()
    assert rerun.code == 0, rerun
    assert "waiting for" not in rerun.err and "takeover" not in rerun.err, rerun.err
    assert rerun.err.rstrip().endswith("backfill 2026-06-01..2026-06-10: all 10 days complete")
    # the rerun found them ended (by a poll, or past their deadline of 3 s where it started later than that)
    assert not list((data_dir / "_state" / "inflight").glob("*"))


def test_a_run_whose_luigid_hangs_ends_within_10_s_of_sigterm(slower, cli, data_dir, tmp_path):
    """luigid frozen (SIGSTOP): it accepts connections and never answers, so every RPC waits for its
    timeout, the keep-alive thread's ping too, which the worker joins on its way out: the solves in
    flight stop polling at once all the same."""
    central = Luigid(tmp_path / "luigid")
    try:
        proc = start(cli, "backfill", *DAYS, **central.env)
        paused_mid_run(cli, proc, slower)  # no solve ends during luigid's frozen second, however loaded the machine
        try:
            central.proc.send_signal(signal.SIGSTOP)
            time.sleep(1.2)  # the worker's RPCs and its keep-alive ping (every second) wait on luigid
            assert proc.poll() is None and pending(slower), cli.output(proc)
            signalled_at, sent_at = slower.now(), time.monotonic()
            stop(proc, "sigterm")
        finally:
            slower.resume_clock()
        assert_stopped(cli, proc, slower, data_dir, signalled_at, sent_at, "sigterm")
    finally:
        central.proc.send_signal(signal.SIGCONT)
        central.stop()


@pytest.mark.parametrize("when", ["after the run", "mid-run"])
def test_luigid_in_the_foreground_stops_within_10_s_of_sigterm_with_its_state_saved(
    live,
    fast_cfg,
    cli,
    tmp_path,
    smtp_server,
    when,
):
    """As a service manager stops it: luigid with [email]/[smtp] in its config (a machine-wide
    /etc/luigi's), holding the tasks a revoked key disabled, idle or serving a run."""
    fast_cfg({"portal": {"regions": "north,south"}})
    central = Luigid(tmp_path / "luigid", extra=smtp_server.cfg())
    try:
        env = {**central.env, "CAPTCHAAI_API_KEY": "f" * 32}  # well-formed, no such account
        if when == "after the run":
            assert cli("backfill", *DAYS, **env).code == 30
        else:
            proc = cli.start("backfill", *DAYS, **env)
            while not central.task_list("DISABLED"):
                assert proc.poll() is None, cli.output(proc)
                time.sleep(0.02)
        disabled = set(central.task_list("DISABLED"))
        sent_at = time.monotonic()
        central.proc.send_signal(signal.SIGTERM)
        code = central.proc.wait(timeout=STOP_WITHIN_S)
    finally:
        central.stop()
    assert code == 0, central.log.read_text()[-2000:]
    assert time.monotonic() - sent_at < STOP_WITHIN_S
    with open(central.state_path, "rb") as f:
        tasks = pickle.load(f)[0]  # what its next start loads: the tasks it had
    assert disabled <= {t for t, task in tasks.items() if task.status == "DISABLED"}
    assert smtp_server.raw == []  # luigid sends no mail, on the way out neither
