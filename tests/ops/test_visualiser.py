"""What the visualiser shows, read through luigid's JSON API as the visualiser reads it:
a running RegionExport's status message and progress, a finished DayExport's, a failed task's
error code, and never the key."""

import datetime
import json
import re
import time

import pytest
import requests

from sandbox import SANDBOX_KEY, FaultPlan, sitekey_for
from tests.helpers.speed import scaled

DAY = datetime.date(2026, 9, 1)
RUNNING_MESSAGE = re.compile(r"^attempt (\d+): CaptchaAI task (\d+), (\d+) polls, (\d+) s$")


def rpc(url, method, **args):
    resp = requests.get(f"{url}/api/{method}", params={"data": json.dumps(args)}, timeout=5)
    resp.raise_for_status()
    return resp.json()["response"]


def tasks_of(url, family, status):
    return {i: t for i, t in rpc(url, "task_list", status=status, upstream_status="").items() if t["name"] == family}


@pytest.mark.unmeasured
def test_a_running_region_shows_its_captchaai_task_polls_seconds_attempt_and_progress(live, luigid, fast_cfg, cli):
    live.configure(solve_s=150)  # 1.5 s per solve, polled every 0.2 s: several polls in flight
    fast_cfg({"captchaai": {"first_poll_s": 0.2, "poll_every_s": 0.2, "timeout_s": scaled(5)}})
    proc = cli.start("export", DAY, SCHEDULER="central")

    seen = {}  # task id -> [(message, progress), ...] while RUNNING
    deadline = time.monotonic() + scaled(30)
    while proc.poll() is None and time.monotonic() < deadline:
        for task_id, task in tasks_of(luigid, "RegionExport", "RUNNING").items():
            # Progress first: a finishing region sets its final message before its 100 %, so a
            # polling message is never read together with a progress of the finished region.
            progress = rpc(luigid, "get_task_progress_percentage", task_id=task_id)["progressPercentage"]
            message = rpc(luigid, "get_task_status_message", task_id=task_id)["statusMessage"]
            seen.setdefault(task_id, []).append((task["params"]["region"], message, progress))
        time.sleep(0.1)
    assert proc.wait(timeout=scaled(30)) == 0, cli.output(proc)[1][-3000:]

    assert len(seen) == 4
    served = {t["id"]: t for t in live.tasks()}
    mid_flight = []
    for region, message, progress in (s for samples in seen.values() for s in samples):
        match = RUNNING_MESSAGE.match(message or "")
        if match:
            attempt, captchaai_id, polls, seconds = map(int, match.groups())
            assert attempt == 1
            assert served[str(captchaai_id)]["googlekey"] == sitekey_for(region)  # the region's own task
            assert 0 <= seconds <= scaled(4) and 1 <= polls <= scaled(20)  # a loaded machine polls late
            assert progress is None or 0 <= progress <= 80  # the share of the 5 s deadline gone; None before it is set
            mid_flight.append((region, polls, progress))
    assert {region for region, _, _ in mid_flight} == {"north", "south", "east", "west"}
    assert max(polls for _, polls, _ in mid_flight) >= 3
    assert max(progress or 0 for _, _, progress in mid_flight) > 0  # progress moves while the solve waits

    regions = tasks_of(luigid, "RegionExport", "DONE")
    assert len(regions) == 4
    for task_id, task in regions.items():
        assert re.fullmatch(r"ok: \d+ rows after 1 attempts", task["status_message"])
        assert rpc(luigid, "get_task_progress_percentage", task_id=task_id)["progressPercentage"] == 100
    ((day_id, day),) = tasks_of(luigid, "DayExport", "DONE").items()
    rows = sum(len(live.expected_records(DAY, r)) for r in ("north", "south", "east", "west"))
    assert (
        rpc(luigid, "get_task_status_message", task_id=day_id)["statusMessage"]
        == f"{rows} rows, 4 solves, 0 unsolvable"
    )
    assert rpc(luigid, "get_task_progress_percentage", task_id=day_id)["progressPercentage"] == 100


@pytest.mark.unmeasured
def test_a_failed_region_names_its_error_code_and_never_the_key(live, luigid, fast_cfg, cli):
    live.configure(faults={"in.php": FaultPlan(rate=1.0, kinds=("server_error",))})
    fast_cfg({"portal": {"regions": "north", "attempts": 2}})

    run = cli("export", DAY, SCHEDULER="central")

    assert run.code == 30, run.err[-3000:]  # [retcode] task_failed
    failed = {**tasks_of(luigid, "RegionExport", "FAILED"), **tasks_of(luigid, "RegionExport", "DISABLED")}
    ((task_id, task),) = failed.items()
    error = json.loads(rpc(luigid, "fetch_error", task_id=task_id)["error"])  # Luigi stores it JSON-encoded
    assert error.startswith("ERROR_SERVER_ERROR: in.php (gave up after 2 attempts)")
    status = rpc(luigid, "get_task_status_message", task_id=task_id)["statusMessage"]
    assert status == "failed: ERROR_SERVER_ERROR"  # not the last progress line it showed
    everything = json.dumps(
        [rpc(luigid, "task_list", status=s, upstream_status="") for s in ("", "FAILED", "DISABLED", "PENDING", "DONE")]
    )
    everything += error + json.dumps(rpc(luigid, "get_task_status_message", task_id=task_id))
    everything += json.dumps(rpc(luigid, "worker_list")) + run.out + run.err
    assert SANDBOX_KEY not in everything
    assert "ERROR_SERVER_ERROR" in run.err
