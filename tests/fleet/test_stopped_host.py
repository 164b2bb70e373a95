"""A host stopped mid-backfill (SIGTERM, then SIGKILL half a second later, as a service manager or an operator's
second thought would) with solves in flight, in a fleet of three under one luigid and one bucket: luigid hands its
regions to the other hosts at once, while CaptchaAI still works on the solves it left. Those count against the cap
until they end (the others poll them), and as the deployment's own: the cap in force never falls for them."""

import json

import pytest

from portal_export.caplog import CapLog
from tests.fleet.test_cap import most_at_once
from tests.helpers.cfg import cfg_text, polls
from tests.helpers.fleet import CAP, DAYS, START, TIMINGS, Bucket, expected_lines, shared_env, told
from tests.helpers.runs import wait_for
from tests.helpers.speed import scaled

SOLVE_S = 3.0  # long enough to outlast the stop, the hand-back and the other hosts' next pages
PAUSE_S = 60  # hosts B and C starting while no solve ends, at most (on the development machine)
STOP = "2026-05-04"  # three days, twelve regions


def in_flight_of(store, host):
    """Task ids in the in-flight marks of `host`'s runs (a run id starts with its hostname)."""
    found = []
    for key in store.list("_state/inflight/"):
        if key.removeprefix("_state/inflight/").startswith(f"{host}-") and (data := store.read(key)):
            found.append(json.loads(data)["task"])
    return found


@pytest.mark.long
@pytest.mark.unmeasured
def test_a_stopped_hosts_solves_hold_their_slots_until_they_end(sandbox, fleet_luigid, hosts, s3_data_dir, seaweedfs):
    from tasks.s3store import S3Store

    sb = sandbox(solve_s=SOLVE_S / 0.01)
    env = shared_env(sb, fleet_luigid, s3_data_dir)
    # A left solve's deadline runs on the store's clock from its submit, through the sandbox's pause below
    # (two hosts starting: up to PAUSE_S on a loaded machine), so that a poll sees its end first
    deadline = scaled(PAUSE_S + 3 * SOLVE_S)
    timings = {**TIMINGS, "captchaai": {**TIMINGS["captchaai"], **polls(SOLVE_S), "timeout_s": deadline}}
    cfg = cfg_text({**timings, "core": {"workers": 2}})
    fleet = {name: hosts(name, env, cfg) for name in ("host-a", "host-b", "host-c")}
    store = S3Store(s3_data_dir)
    fleet["host-a"].start("backfill", START, STOP)
    wait_for(lambda: len(in_flight_of(store, "host-a")) == 2, "host A's two solves in flight", timeout=60)
    # No solve ends until host A is gone: its two are still in flight at its stop however slowly a
    # loaded machine starts the other hosts (on the sandbox's clock, not a solve long enough for it)
    sb.pause_clock()
    for name in ("host-b", "host-c"):
        fleet[name].start("backfill", START, STOP)
    wait_for(
        lambda: sum(t["status"] == "pending" for t in sb.tasks()) == CAP, "the cap's solves in flight", timeout=PAUSE_S
    )
    left = in_flight_of(store, "host-a")
    fleet["host-a"].terminate(grace_s=0.5)
    sb.resume_clock()

    runs = [fleet[name].wait(timeout=scaled(120)) for name in ("host-b", "host-c")]
    assert [r.code for r in runs] == [0, 0], told(runs)
    bucket = Bucket(seaweedfs, s3_data_dir)
    for day in DAYS[:3]:
        assert bucket.day_lines(day) == expected_lines(day), day  # every record once
    assert most_at_once(sb.tasks()) <= CAP and sb.stats()["threads"]["peak"] <= CAP  # at the service, all hosts
    caps = [c["cap"] for c in CapLog(store).changes()]
    assert caps and set(caps) == {CAP}, caps  # A's solves are the deployment's own: no other consumer
    ended = [f"left solve of task {task} ended at CaptchaAI" for task in left]
    assert left and all(any(line in r.err for r in runs) for line in ended), (left, [r.err[-3000:] for r in runs])
    assert not store.list("_state/inflight/")
