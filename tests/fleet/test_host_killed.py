"""Worker hosts sharing one luigid: each host a `python -m ops` in its own PID namespace, folder,
HOME and TMPDIR (sandbox/hosts.py), sharing only luigid, one bucket of a real object store
(SeaweedFS) and the sandbox. What they delivered is read from the bucket."""

import re
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest

from tests.helpers.cfg import FAST_CLIENT, cfg_text, polled
from tests.helpers.fleet import DAYS, FAST_DEATH, START, STOP, expected_lines, region_of, shared_env, submits, told
from tests.helpers.speed import scaled


def host_processes(host):
    """The live processes of a host: every one, whenever it was started, has the host's HOME (as has
    `unshare`, which started it from outside)."""
    return [
        p
        for p in psutil.process_iter(["environ", "status"])
        if (p.info["environ"] or {}).get("HOME") == str(host.home)
        and p.info["status"] != psutil.STATUS_ZOMBIE
        and p.pid != host.proc.pid
    ]


def assert_every_day_exact(runs, bucket):
    """Every run says the range is complete, and every day in the bucket holds each region's records once."""
    for run in runs:
        assert f"backfill {START}..2026-05-06: all 6 days complete" in run.err, run
    for day in DAYS:
        assert bucket.day_lines(day) == expected_lines(day), day  # every record once


@pytest.mark.long
def test_two_hosts_share_one_backfill_through_luigid(sandbox, central, hosts, s3_data_dir, bucket):
    """Two hosts run the same 6-day backfill at once, 2 workers each, on one luigid (cap 4): every
    day is exact, every region is solved once (the sandbox counts the submits), both exit 0, and
    both did part of the work."""
    sb = sandbox(solve_s=50)  # 0.5 s per solve: the hosts' solves overlap
    env = shared_env(sb, central, s3_data_dir)
    cfg = cfg_text({**polled(FAST_CLIENT, 0.5), "core": {"workers": 2}})
    a, b = hosts("host-a", env, cfg), hosts("host-b", env, cfg)

    a.start("backfill", START, STOP)
    b.start("backfill", START, STOP)
    runs = [a.wait(timeout=scaled(120)), b.wait(timeout=scaled(120))]

    assert [r.code for r in runs] == [0, 0], told(runs)
    assert_every_day_exact(runs, bucket)
    submits = Counter((parse_qs(urlsplit(t["pageurl"]).query)["day"][0], t["googlekey"]) for t in sb.tasks())
    assert len(submits) == 24 and set(submits.values()) == {1}, submits  # no region solved twice
    assert sb.stats()["threads"]["peak"] <= 4  # luigid's cap over both hosts
    ran = {r.name: r.err.count("done      RegionExport(") for r in runs}
    assert sum(ran.values()) == 24 and all(ran.values()), ran  # the hosts shared the work


def test_killing_a_host_kills_its_whole_process_tree_at_once(sandbox, hosts, s3_data_dir):
    """Host.kill() is a machine dying: SIGKILL of the namespace's init takes its task processes
    with it (no PR_SET_PDEATHSIG round needed); nothing of the host polls CaptchaAI afterwards."""
    sb = sandbox(solve_s=1000)  # 10 s per solve: the regions are mid-solve when the host dies
    env = {**shared_env(sb, None, s3_data_dir), "SCHEDULER": "local"}
    host = hosts("host-a", env, cfg_text({**FAST_CLIENT, "core": {"workers": 2}})).start("backfill", START, STOP)
    deadline = time.monotonic() + scaled(30)
    while len(sb.tasks()) < 2:  # both task processes submitted a solve and poll it
        assert time.monotonic() < deadline and host.proc.poll() is None, host.output()[1][-2000:]
        time.sleep(0.05)
    assert host.init().pid in {p.pid for p in host_processes(host)}  # the look below finds the host's processes
    doomed = host.kill()
    gone_by = time.monotonic() + scaled(1)
    assert len(doomed) >= 3  # the CLI's process and its two task processes
    _, alive = psutil.wait_procs(doomed, timeout=scaled(1))
    assert not alive and time.monotonic() <= gone_by + 0.1
    assert host_processes(host) == []  # nobody of that host is left to poll, listed above or not
    run = host.wait(timeout=scaled(10))
    assert run.killed and run.code != 0
    assert "running   RegionExport(" in run.err


@pytest.mark.long
def test_a_host_killed_mid_backfill_leaves_its_regions_to_the_others(sandbox, fleet_luigid, hosts, s3_data_dir, bucket):
    """Three hosts run one 6-day backfill (2 workers each, cap 4); host-a is SIGKILLed with its whole
    process tree while it solves. The other two take its regions over in the same command, after
    luigid's worker_disconnect_delay and retry_delay: both exit 0, every day is exact, and the only
    regions solved twice are those host-a had a solve in flight for (its in-flight solves are the
    only waste)."""
    sb = sandbox(solve_s=100)  # 1 s per solve
    env = shared_env(sb, fleet_luigid, s3_data_dir)
    cfg = cfg_text(
        {**polled(FAST_CLIENT, 1.0), "core": {"workers": 2}, "scheduler": {"retry_delay": FAST_DEATH["retry_delay"]}}
    )
    a, b, c = (hosts(name, env, cfg) for name in ("host-a", "host-b", "host-c"))
    for host in (a, b, c):
        host.start("backfill", START, STOP)

    def running_on_a():
        return {
            region_of(t)
            for t in fleet_luigid.task_list("RUNNING").values()
            if t["name"] == "RegionExport" and "host=host-a," in (t["worker_running"] or "")
        }

    deadline = time.monotonic() + scaled(60)
    while True:  # host-a has a solve in flight for a region luigid lists as running there
        if running_on_a() & set(submits(sb)):
            break
        assert time.monotonic() < deadline and a.proc.poll() is None, a.output()[1][-2000:]
        time.sleep(0.05)
    psutil.wait_procs(a.kill(), timeout=2)
    held = running_on_a()  # luigid still lists them as running: it has not noticed yet
    in_flight = held & set(submits(sb))  # frozen now: host-a is gone
    assert in_flight

    runs = [b.wait(timeout=scaled(120)), c.wait(timeout=scaled(120))]
    assert a.wait(timeout=scaled(10)).killed
    assert [r.code for r in runs] == [0, 0], told(runs)
    assert_every_day_exact(runs, bucket)

    taken = {
        (m["date"], m["region"])
        for run in runs
        for m in re.finditer(r"re-enabled RegionExport\(date=(?P<date>[\d-]+), region=(?P<region>\w+)\)", run.err)
    }
    assert taken and taken <= held, (taken, held)  # exactly host-a's running regions, each by one host
    per_region = submits(sb)
    assert len(per_region) == 24 and set(per_region.values()) <= {1, 2}, per_region
    twice = {region for region, n in per_region.items() if n == 2}
    assert twice <= in_flight & taken, (twice, in_flight, taken)  # the only waste: host-a's in-flight solves
    assert sb.stats()["threads"]["peak"] <= 4


def test_three_hosts_on_a_revoked_key_send_one_alert(sandbox, fleet_luigid, hosts, s3_data_dir, smtp_server, webhook):
    """Three hosts run one backfill with a revoked key: one e-mail and one webhook POST in all, from
    the host that claimed the alert first; it says which host saw which failure, and the other two
    say who sent it. Every region failed for real, so none was taken over, although luigid soon
    takes the hosts that ended for dead. (A host that ran nothing waits for the others' tasks until
    luigid forgets their ended workers: 5 s here, worker_disconnect_delay 60 s in luigi.cfg.)"""
    sb = sandbox()
    hook = webhook()
    env = {**shared_env(sb, fleet_luigid, s3_data_dir), "CAPTCHAAI_API_KEY": "f" * 32}
    env["ALERT_WEBHOOK_URL"] = hook.url
    cfg = cfg_text({**FAST_CLIENT, **smtp_server.cfg(), "core": {"workers": 2}})
    fleet = [hosts(name, env, cfg) for name in ("host-a", "host-b", "host-c")]
    for host in fleet:
        host.start("backfill", START, "2026-05-04")
    runs = [host.wait(timeout=scaled(120)) for host in fleet]

    assert all(r.code not in (0, 2) for r in runs), runs  # a failed run, not a refused one
    assert len(smtp_server.raw) == 1, smtp_server.texts()
    assert len(hook.raw) == 1, hook.texts()
    (subject, body), (text,) = smtp_server.texts()[0], hook.texts()
    assert text == f"{subject}\n\n{body.rstrip()}"
    assert subject == f"backfill {START}..2026-05-03: 3 of 3 days missing"
    senders = [r for r in runs if "alert sent by webhook" in r.err]
    assert len(senders) == 1, runs
    (sender,) = senders
    assert f"host {sender.name}, data dir" in body
    for run in runs:
        if run is not sender:
            assert f"alert: sent by host {sender.name} at " in run.err, run
        assert "takeover:" not in run.err, run  # a real failure is never taken over
    where = body.split("Where they failed:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    named = {line.split(":")[0].removeprefix("- ") for line in where}
    assert named and named <= {"host-a", "host-b", "host-c"}, where
    assert sum(int(line.split(": ", 1)[1].split(" × ")[0]) for line in where) == 12, where  # every region once
    assert all(line.endswith(" × ERROR_KEY_DOES_NOT_EXIST") for line in where), where
