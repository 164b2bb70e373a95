"""Fleets as they really come: hosts that share one hostname, and hosts whose wall clocks disagree by
minutes. Three worker hosts (sandbox/hosts.py, each in its own PID namespace: every host's CLI is
pid 1), one luigid, one s3:// bucket, the cap following the plan; one host is killed mid-backfill.
Neither the shared name nor the clocks may change anything: luigid's cap never drops below the
configured one (nobody else uses the key), every day is exact, the survivors exit 0, and a failed
run sends one alert."""

import json
import re
import threading
import time

import psutil
import pytest

from portal_export.caplog import CapLog
from portal_export.state import split_run
from tests.helpers.cfg import cfg_text, polled
from tests.helpers.fleet import (
    CAP,
    DAYS,
    FAST_DEATH,
    START,
    STOP,
    TIMINGS,
    Bucket,
    expected_lines,
    region_of,
    shared_env,
    submits,
    told,
)
from tests.helpers.runs import wait_for
from tests.helpers.speed import scaled

SKEW_S = 300.0  # five minutes ahead, five behind


class Totals:
    """luigid's `captchaai` total, sampled every 50 ms while the hosts run."""

    def __init__(self, luigid):
        self.luigid, self.seen, self._stop = luigid, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._stop.wait(0.05):
            totals = {r["name"]: r["num_total"] for r in self.luigid.rpc("resource_list")}
            if "captchaai" in totals:
                self.seen.append(totals["captchaai"])

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
        return self.seen


def backfill_with_a_host_killed(sb, luigid, fleet, store_url, seaweedfs):
    """Run the 6-day backfill on `fleet` (name -> Host), kill the first host once it runs regions
    and others are under way, and check what must hold whatever the names and clocks. The survivors'
    runs, the heartbeats seen just before the kill (run id -> (heartbeat, when read)), the cap log."""
    from tasks.s3store import S3Store

    caplog = CapLog(S3Store(store_url))
    totals = Totals(luigid)
    for host in fleet.values():
        host.start("backfill", START, STOP)
    doomed, *survivors = fleet.values()

    def running_on_doomed():
        """(day, region) of what luigid lists as running on the doomed host's worker: by its whole
        id, which its log prints (its hostname and pid are the others' too)."""
        found = re.search(r"Worker (Worker\(salt=\d+, [^)]*\))", doomed.output()[1])
        tasks = luigid.task_list("RUNNING").values()
        return {
            region_of(t) for t in tasks if found and t["worker_running"] == found[1] and t["name"] == "RegionExport"
        }

    def doomed_solves():
        """A solve in flight for a region luigid lists as running on the doomed host; the sandbox's
        clock stands still from then until the kill is seen, so that it is still in flight there
        however slowly a loaded machine reads the heartbeats and kills."""
        if found := running_on_doomed() & set(submits(sb)):
            sb.pause_clock()
        return found

    wait_for(doomed_solves, "host 1 solves")
    store = S3Store(store_url)
    runs_seen = {}  # each run's heartbeat as it wrote it (its `t` is its host's clock), and when it was read

    def every_heartbeat_seen():
        for key in store.list("_state/runs/"):
            run = key.removeprefix("_state/runs/").removesuffix(".json")
            if run not in runs_seen and (beat := store.read(key)) is not None:
                runs_seen[run] = (json.loads(beat), time.time())
        return len(runs_seen) == len(fleet)

    every_heartbeat_seen()  # the doomed run's, before it dies
    psutil.wait_procs(doomed.kill(), timeout=2)
    held = running_on_doomed()  # luigid has not noticed yet
    sb.resume_clock()
    # a host that a loaded machine started seconds late beats by now or soon: the survivors run on
    # until the dead host's regions are done again
    wait_for(every_heartbeat_seen, "every run's heartbeat")

    runs = [host.wait(timeout=scaled(120)) for host in survivors]
    seen = totals.stop()
    assert doomed.wait(timeout=scaled(10)).killed
    assert [r.code for r in runs] == [0, 0], told(runs)
    for run in runs:
        assert f"backfill {START}..2026-05-06: all 6 days complete" in run.err, run
    bucket = Bucket(seaweedfs, store_url)
    for day in DAYS:
        assert bucket.day_lines(day) == expected_lines(day), day  # every record once

    # the cap: nobody else uses the key, so it never went below the configured cap, on luigid or in the log
    assert len(seen) > 20 and min(seen) >= CAP, seen
    changes = caplog.changes()
    assert changes and {c["cap"] for c in changes} == {CAP}, changes
    # the survivors took the dead host's running regions over, each once
    taken = [
        (m["date"], m["region"])
        for run in runs
        for m in re.finditer(r"re-enabled RegionExport\(date=(?P<date>[\d-]+), region=(?P<region>\w+)\)", run.err)
    ]
    assert taken and len(taken) == len(set(taken)) and set(taken) <= held, (taken, held)
    return runs, runs_seen, changes


@pytest.mark.long
@pytest.mark.unmeasured
def test_hosts_with_one_hostname_keep_the_cap_and_take_a_dead_hosts_regions_over(
    sandbox,
    fleet_luigid,
    hosts,
    s3_data_dir,
    seaweedfs,
):
    """Three hosts named `vm`, each CLI pid 1 in its namespace: three runs, told apart by their ids."""
    sb = sandbox(solve_s=100)  # 1 s a solve
    env = shared_env(sb, fleet_luigid, s3_data_dir)
    cfg = cfg_text(
        {**polled(TIMINGS, 1.0), "core": {"workers": 2}, "scheduler": {"retry_delay": FAST_DEATH["retry_delay"]}}
    )
    fleet = {name: hosts(name, env, cfg, hostname="vm") for name in ("host-a", "host-b", "host-c")}

    _, heartbeats, changes = backfill_with_a_host_killed(sb, fleet_luigid, fleet, s3_data_dir, seaweedfs)

    ids = set(heartbeats)
    assert len(ids) == 3 and {split_run(run) for run in ids} == {("vm", 1)}, ids  # one name, one pid, three runs
    assert {c["run"] for c in changes} <= ids, changes  # the owners were among them


@pytest.mark.long
@pytest.mark.unmeasured
def test_hosts_whose_clocks_disagree_by_minutes_keep_the_cap_and_alert_once(
    sandbox,
    fleet_luigid,
    hosts,
    s3_data_dir,
    seaweedfs,
    smtp_server,
    webhook,
):
    """One host's wall clock 5 minutes ahead, one's 5 minutes behind (every Python process of each),
    one's right. The host ahead is killed mid-backfill; then a run on a revoked key fails on all
    three, and one alert is sent."""
    sb = sandbox(solve_s=100)
    env = shared_env(sb, fleet_luigid, s3_data_dir)
    cfg = cfg_text(
        {**polled(TIMINGS, 1.0), "core": {"workers": 2}, "scheduler": {"retry_delay": FAST_DEATH["retry_delay"]}}
    )
    clocks = {"ahead": SKEW_S, "behind": -SKEW_S, "right": 0.0}
    fleet = {name: hosts(name, env, cfg, clock_s=offset) for name, offset in clocks.items()}
    _, heartbeats, _ = backfill_with_a_host_killed(sb, fleet_luigid, fleet, s3_data_dir, seaweedfs)
    # each beat read some seconds after it was written, more on a loaded machine: at most 50 s (the
    # speed factor's 10) of the 300 s between the clocks
    offsets = sorted(state["t"] - at for state, at in heartbeats.values())
    assert len(offsets) == 3 and all(
        abs(o - want) < scaled(5) for o, want in zip(offsets, (-SKEW_S, 0, SKEW_S), strict=True)
    ), offsets

    # a failed run: one alert, whichever host claims it first and whatever its clock says
    hook = webhook()
    failing = {**env, "CAPTCHAAI_API_KEY": "f" * 32, "ALERT_WEBHOOK_URL": hook.url}
    cfg = cfg_text({**FAST_CLIENT_ALERT, **smtp_server.cfg(), "core": {"workers": 2}})
    second = [hosts(f"{name}-2", failing, cfg, clock_s=offset) for name, offset in clocks.items()]
    for host in second:
        host.start("backfill", "2026-06-01", "2026-06-03")
    failed = [host.wait(timeout=scaled(120)) for host in second]
    assert all(r.code not in (0, 2) for r in failed), failed
    assert len(hook.raw) == 1 and len(smtp_server.raw) == 1, (hook.texts(), [r.err[-1500:] for r in failed])
    senders = [r for r in failed if "alert sent by webhook" in r.err]
    assert len(senders) == 1, failed
    for run in failed:
        if run is not senders[0]:
            assert f"alert: sent by host {senders[0].name} at " in run.err, run
    (text,) = hook.texts()
    assert "(earlier run)" not in text, text  # every host's failure is of this run, whatever its clock


FAST_CLIENT_ALERT = {"captchaai": TIMINGS["captchaai"], "portal": TIMINGS["portal"]}
