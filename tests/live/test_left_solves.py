"""A cap that holds when a run stops (shared/CONTRACT.md "The cap and the plan"): the solves a stopped or killed run
left at CaptchaAI hold plan threads until they end, and count against the cap until then, while another run waits
for slots. One host, one luigid, the real CLI against the sandbox, whose record of each task (submit to ready) is
the service's count of solves in flight. The fleet's case: tests/fleet/test_stopped_host.py."""

import json
import os
import signal

import pytest

from tests.helpers.cfg import polls
from tests.helpers.fleet import FAST_DEATH
from tests.helpers.runs import Luigid, wait_for
from tests.helpers.speed import scaled

CAP = 4
SOLVE_S = 6.0
PAUSE_S = 30  # the second run starting while no solve ends, at most (on the development machine)
FIRST = ("2026-07-01", "2026-07-03")  # 2 days, 2 workers: two solves of the first run in flight at a time
SECOND = ("2026-07-11", "2026-07-13")  # 2 days, 4 workers: it takes the other two slots and waits for two more


def left_tasks(data_dir, run_pid):
    """Task ids in the in-flight marks of the run whose CLI is `run_pid`."""
    found = []
    for path in (data_dir / "_state" / "inflight").glob(f"*-{run_pid}-*"):
        text = path.read_text()
        if text:
            found.append(json.loads(text)["task"])
    return found


@pytest.mark.long
@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_runs_left_solves_keep_their_slots_from_a_run_that_waits(how, live, fast_cfg, cli, data_dir, tmp_path):
    """Stopped (SIGTERM): luigid gets its tasks back at once and the waiting run would take their slots while
    CaptchaAI still works on them. Killed (SIGKILL to its process group): luigid frees its slots once it takes the
    worker for dead (FAST_DEATH's 4 s, shorter than these solves). Either way the waiting run polls the left tasks
    and submits only as they end: never more than the cap in flight at the service, every day exact. The left solves
    (SOLVE_S) outlast the second run's start, the stop and the first run's death; the second run's own take twice as
    long, so that the slots its waiting regions get are the left solves' (polled every quarter of SOLVE_S), not those
    of its own first solves. The sandbox's clock stands still from the first run's two solves to its end, however
    slowly a loaded machine starts the second; their deadline spans that pause."""
    deadline = scaled(3 * SOLVE_S + PAUSE_S)
    fast_cfg({"portal": {"regions": "north,south"}, "captchaai": {**polls(SOLVE_S), "timeout_s": deadline}})
    live.configure(solve_s=SOLVE_S / live.config.time_scale)
    central = Luigid(tmp_path / "luigid", extra={"scheduler": FAST_DEATH})
    try:
        first = cli.start("--workers", "2", "backfill", *FIRST, own_group=True, **central.env)
        wait_for(lambda: len(left_tasks(data_dir, first.pid)) == 2, "two solves of the first run in flight")
        live.pause_clock()
        try:
            live.configure(solve_s=2 * SOLVE_S / live.config.time_scale)
            second = cli.start("backfill", *SECOND, **central.env)
            wait_for(
                lambda: sum(t["status"] == "pending" for t in live.tasks()) == CAP,
                "the second run's two solves",
                timeout=PAUSE_S,
            )
            in_flight = left_tasks(data_dir, first.pid)
            if how == "stopped":
                first.send_signal(signal.SIGTERM)
            else:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=scaled(10))
        finally:
            live.resume_clock()
        code = second.wait(timeout=scaled(60))
    finally:
        central.stop()
    err = cli.output(second)[1]
    assert code == 0 and err.rstrip().endswith(f"backfill {SECOND[0]}..2026-07-12: all 2 days complete"), err
    assert live.stats()["threads"]["peak"] <= CAP, live.stats()["threads"]  # at the service, over both runs
    ended = "ended at CaptchaAI: its slot is free"
    assert all(f"left solve of task {task} {ended}" in err for task in in_flight), (in_flight, err)
    assert not list((data_dir / "_state" / "inflight").glob("*"))
