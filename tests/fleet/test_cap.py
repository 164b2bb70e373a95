"""The cap holds across hosts: three worker hosts (sandbox/hosts.py), one luigid, one s3:// bucket, the
cap following the plan at the tests' timings. One host owns the cap at a time; another consumer
takes threads mid-run; the owner's host dies and another host takes the cap over within the bound;
the last run out puts luigid's cap back."""

import itertools
import re

import psutil
import pytest

from portal_export.caplog import CapLog
from portal_export.runs import ttl_s
from portal_export.state import split_run
from tests.helpers.cfg import cfg_text
from tests.helpers.fleet import (
    CAP,
    DAYS,
    FAST_DEATH,
    PLAN_EVERY_S,
    START,
    STOP,
    TIMINGS,
    Bucket,
    expected_lines,
    shared_env,
    told,
)
from tests.helpers.runs import wait_for
from tests.helpers.speed import scaled


def most_at_once(tasks):
    """Our solves in flight at CaptchaAI at most, from the sandbox's record of each task."""
    edges = sorted([(t["submit_t"], 1) for t in tasks] + [(t["ready_t"], -1) for t in tasks])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.long
@pytest.mark.unmeasured
def test_cap_across_hosts(sandbox, fleet_luigid, hosts, s3_data_dir, seaweedfs):
    """Three hosts hold one cap, and the owner's death hands it on. (A short name: the hosts' TMPDIR
    is below the test's folder, and Luigi's worker binds a Unix socket there, 108 bytes at most.)"""
    sb = sandbox(solve_s=300)  # 3 s a solve: the backfill outlasts the owner's death by more than the TTL
    env = shared_env(sb, fleet_luigid, s3_data_dir)  # the hosts share no directory: luigid, the bucket, the sandbox
    cfg = cfg_text({**TIMINGS, "core": {"workers": 2}, "scheduler": {"retry_delay": FAST_DEATH["retry_delay"]}})
    fleet = {name: hosts(name, env, cfg) for name in ("host-a", "host-b", "host-c")}
    from tasks.s3store import S3Store

    caplog = CapLog(S3Store(s3_data_dir))
    sb.occupy_at_next_submit(2, seconds=200.0)  # another consumer: 2 threads for 2 s, at one of our submits
    for host in fleet.values():
        host.start("backfill", START, STOP)

    first = wait_for(caplog.changes, "the owner's first reading")[0]
    owner = split_run(first["run"])[0]  # the run id is <hostname>-<pid>-<random>
    assert owner in fleet and first["cap"] == CAP
    # the consumer came and went: the cap went down, and back up to the configured cap
    wait_for(lambda: sb.ambushed() == 2, "the other consumer took its threads")
    wait_for(lambda: any(c["cap"] < CAP for c in caplog.changes()), "the cap followed the plan down")
    wait_for(lambda: caplog.changes()[-1]["cap"] == CAP, "the cap came back up")

    psutil.wait_procs(fleet[owner].kill(), timeout=2)
    survivors = [host for name, host in fleet.items() if name != owner]
    took = wait_for(
        lambda: [m for h in survivors for m in re.finditer(r"cap: run (\S+) took over the cap .*", h.output()[1])],
        "another host took the cap over",
        timeout=60,
    )
    assert len(took) == 1, [m.group(0) for m in took]  # one host took it over, once
    age = float(re.search(r"stopped its heartbeat ([\d.]+) s ago", took[0].group(0)).group(1))
    ttl = ttl_s(PLAN_EVERY_S)
    # within the bound: the TTL and a heartbeat (0.25 s), aged on the store's clock (whole seconds here)
    assert ttl <= age <= ttl + 2.0, took[0].group(0)
    new_owner = took[0].group(1)

    runs = [host.wait(timeout=scaled(180)) for host in survivors]
    assert fleet[owner].wait(timeout=scaled(10)).killed
    assert [r.code for r in runs] == [0, 0], told(runs)
    store = S3Store(s3_data_dir)
    bucket = Bucket(seaweedfs, s3_data_dir)
    for day in DAYS:
        assert bucket.day_lines(day) == expected_lines(day), day  # every record once

    assert most_at_once(sb.tasks()) <= CAP  # over all hosts, the killed one's included
    changes = caplog.changes()
    owners = [c["run"] for c in changes]
    blocks = [run for i, run in enumerate(owners) if i == 0 or owners[i - 1] != run]
    # one run at a time, never two in turn: the owner, its heir (and the last host, if the heir ended first)
    assert blocks[:2] == [first["run"], new_owner] and len(blocks) == len(set(blocks)), changes
    caps = [c["cap"] for c in changes]
    assert sum(a == CAP and b < CAP for a, b in itertools.pairwise(caps)) == 1, changes  # down once
    assert len(caps) <= 7, changes  # 4, down (through 3 if the threads came a reading apart), up; each heir's 4
    assert {r["name"]: r["num_total"] for r in fleet_luigid.rpc("resource_list")}["captchaai"] == CAP  # restored
    assert not store.list("_state/runs/") and not store.list("_state/inflight/")  # nothing left behind
