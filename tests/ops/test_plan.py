"""The plan check: `make plan` judges the cap and the workers against the plan's threads; every
export and backfill does the same once at start and only warns; busy threads during a run are
named in the log, and the run completes once they free up."""

import datetime
import json
import threading
import time

import pytest

from tests.helpers.speed import scaled

DAY = datetime.date(2026, 9, 1)
NORTH = {"portal": {"regions": "north"}}


@pytest.mark.unmeasured
def test_make_plan_prints_threads_cap_workers_and_ok(live, cli):
    run = cli("plan")
    assert run.code == 0, run.err
    assert "plan: 5 threads, 0 working now; cap 4 solves ([resources] captchaai), 8 workers: ok" in run.err


@pytest.mark.unmeasured
def test_make_plan_says_the_cap_the_plan_leaves_and_the_last_change(live, cli, central):
    assert live.occupy_threads(2, 1000) == 2  # another consumer, for 10 s
    central.rpc("update_resource", resource="captchaai", amount=2)  # as a run's governor left it
    run = cli("plan", **central.env)
    assert f"plan: 5 threads, 2 working now; cap 2 solves (luigid's at {central.url}), 8 workers: ok" in run.err
    assert (
        "cap: 2 of 4 configured, following the plan "
        "(another consumer holds 2 of 5 plan threads; 0 solves of ours in flight)"
    ) in run.err


@pytest.mark.unmeasured
@pytest.mark.parametrize(
    "case, verdict",
    [
        ("cap leaves no spare", "[resources] captchaai = 5 leaves no spare thread on a 5-thread plan: set it to 4"),
        ("workers below cap", "2 workers cannot fill a cap of 4 solves: set [core] workers >= 4"),
        ("smaller plan", "[resources] captchaai = 4 leaves no spare thread on a 3-thread plan: set it to 2"),
    ],
)
def test_make_plan_fails_on_a_bad_verdict(case, verdict, live, fast_cfg, cli):
    argv = ["plan"]
    if case == "cap leaves no spare":
        fast_cfg({"resources": {"captchaai": 5}})
    elif case == "workers below cap":
        argv = ["--workers", "2", "plan"]
    else:
        live.configure(threads=3)
    run = cli(*argv)
    assert run.code == 1
    assert verdict in run.err
    assert "warning" not in run.err  # `make plan` fails; it does not merely warn


def test_an_export_with_a_bad_verdict_warns_and_completes(live, fast_cfg, cli, data_dir):
    fast_cfg(NORTH)
    run = cli("--workers", "2", "export", DAY)
    assert run.code == 0, run.err[-3000:]
    (line,) = [line for line in run.err.splitlines() if "plan:" in line]
    assert line.startswith("warning: plan: 5 threads, 0 working now; cap 4 solves")
    assert "2 workers cannot fill a cap of 4 solves" in line
    assert (data_dir / f"portal_records_{DAY}.jsonl").exists()


@pytest.mark.unmeasured
def test_saturated_threads_are_named_in_the_log_and_the_run_completes_once_they_free(live, fast_cfg, cli, data_dir):
    """Another consumer on the same key holds every plan thread until the run has said so: the cap
    in force drops to 0 and the region waits for a slot in Luigi, sending nothing to be refused."""
    fast_cfg({**NORTH, "captchaai": {"plan_every_s": 0.1}})
    freed = threading.Event()

    def other_consumer():  # holds overlap, so no thread is free until `freed`
        while not freed.is_set():
            live.occupy_threads(5, 30)  # 0.3 s at the sandbox's time scale; takes only free threads
            time.sleep(0.1)

    holder = threading.Thread(target=other_consumer, daemon=True)
    holder.start()
    try:
        proc = cli.start("export", DAY)
        deadline = time.monotonic() + scaled(30)
        while "another consumer holds all 5 plan threads" not in cli.output(proc)[1]:
            assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)[1][-3000:]
            time.sleep(0.05)
    finally:
        freed.set()
        holder.join()
    assert proc.wait(timeout=scaled(30)) == 0, cli.output(proc)[1][-3000:]

    err = cli.output(proc)[1]
    assert "warning: plan: all 5 threads are busy now: another consumer is using this key" in err  # at start
    assert (
        "INFO: ops.steward: cap 0 (the local scheduler's, configured 4): another consumer holds all 5 plan threads"
        in err
    )
    assert "cap 0 → 4: the plan leaves 4" in err  # during the run, once they freed
    health = json.loads((data_dir / f"portal_records_{DAY}.health.json").read_text())
    north = health["regions"]["north"]
    assert north["status"] == "ok" and north["attempts"] == 1 and north["transient_errors"] == []
    assert health["seconds_below_cap"] > 0
    stats = live.stats()
    assert stats["codes"].get("in.php", {}).get("ERROR_ZERO_BALANCE", 0) == 0  # waited, never refused
    assert stats["tokens"]["accepted"] == 1


def test_with_follow_plan_false_saturated_threads_are_refused_and_waited_out(live, fast_cfg, cli, data_dir):
    """The fixed cap: the region submits into the busy plan, is refused, and waits, reading the plan
    itself at its poll interval, until a thread frees: no attempt spent."""
    fast_cfg(
        {
            **NORTH,
            "captchaai": {"follow_plan": "false"},
            "portal": {**NORTH["portal"], "attempts": 12, "retry_base_s": 0.05, "retry_jitter_s": 0.01},
        }
    )
    assert live.occupy_threads(5, 6000) == 5  # until released below, however slowly the run starts
    proc = cli.start("export", DAY)
    deadline = time.monotonic() + scaled(30)
    while not live.stats()["codes"].get("in.php", {}).get("ERROR_ZERO_BALANCE"):
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)[1][-3000:]
        time.sleep(0.01)
    looks = live.stats()["actions"]["threadsinfo"]  # the plan check's, and maybe the refusal's diagnosis
    while live.stats()["actions"]["threadsinfo"] < looks + 2:  # the region waits, looking at the plan itself
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)[1][-3000:]
        time.sleep(0.01)
    assert live.release_threads() == 5
    released = time.monotonic()
    assert proc.wait(timeout=scaled(30)) == 0, cli.output(proc)[1][-3000:]
    err = cli.output(proc)[1]
    assert (
        "WARNING: portal_export.captchaai: CaptchaAI refused a submit with ERROR_ZERO_BALANCE: "
        "all 5 plan threads busy (5 working): another consumer is using this key"
    ) in err
    north = json.loads((data_dir / f"portal_records_{DAY}.health.json").read_text())["regions"]["north"]
    assert north["status"] == "ok" and (north["attempts"], north["transient_errors"]) == (1, [])
    assert north["busy_waits"] == 1 == live.stats()["codes"]["in.php"]["ERROR_ZERO_BALANCE"]  # one wait, to the end
    # seen at its poll interval, not a plan period (30 s) per look; scaled for a loaded machine, within that
    assert time.monotonic() - released < min(scaled(10), 25)
