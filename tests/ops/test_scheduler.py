"""`make scheduler` / `make scheduler-stop`, and runs sharing one central scheduler.

The scheduler tests point PORTAL_VAR_DIR at a temporary directory, so nothing touches the
repository's var/.
"""

import contextlib
import datetime
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
import requests

from ops.luigid import answers as scheduler_answers
from sandbox.hosts import unshare
from sandbox.ports import free_port
from tests import ROOT
from tests.helpers.cfg import polls
from tests.helpers.programs import is_root, program
from tests.helpers.speed import scaled

DAY = datetime.date(2026, 9, 1)


def rpc(url, method, **args):
    resp = requests.get(f"{url}/api/{method}", params={"data": json.dumps(args)}, timeout=5)
    resp.raise_for_status()
    return resp.json()["response"]


def gone(pid, within_s=5):
    """The process ended (an exiting process or a zombie counts: it serves nothing)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def var(tmp_path, monkeypatch):
    """A var dir and a free port for `make scheduler`; whatever it started is stopped afterwards."""
    path = tmp_path / "var"
    monkeypatch.setenv("PORTAL_VAR_DIR", str(path))
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", f"http://127.0.0.1:{free_port()}")
    yield path
    subprocess.run([sys.executable, "-m", "ops", "scheduler-stop"], cwd=ROOT, capture_output=True, timeout=30)
    pidfile = path / "luigid.pid"
    if pidfile.exists():  # stop failed: do not leave a daemon behind
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_make_scheduler_starts_once_on_loopback_persists_state_and_history_and_stops(live, fast_cfg, cli, var):
    fast_cfg({"resources": {"captchaai": 3}, "portal": {"regions": "north"}})
    url = os.environ["LUIGI_SCHEDULER_URL"]

    started = cli("scheduler")

    assert started.code == 0, started.err
    assert f"scheduler: luigid running at {url}" in started.err
    assert scheduler_answers(url)
    pid = int((var / "luigid.pid").read_text())
    listening = [c.laddr for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", urlsplit(url).port)]  # loopback only
    cfg = (var / "luigid.cfg").read_text()  # written from the effective client config
    assert "[resources]\ncaptchaai = 3\n" in cfg
    assert "record_task_history = true" in cfg and f"sqlite:///{var / 'luigid' / 'history.db'}" in cfg
    assert (var / "luigid" / "history.db").exists()
    assert (var / "luigid").stat().st_mode & 0o777 == 0o700  # luigid writes with umask 0
    assert (var / "luigid.pid").stat().st_mode & 0o022 == 0
    assert rpc(url, "resource_list")[0] | {"running": None} == {  # the cap in luigid's own config
        "name": "captchaai",
        "num_total": 3,
        "num_used": 0,
        "num_consumer": 0,
        "running": None,
    }

    second = cli("scheduler")

    assert second.code == 1
    assert f"error: a central scheduler is already running at {url} (pid {pid})" in second.err
    assert psutil.pid_exists(pid) and scheduler_answers(url)

    export = cli("export", DAY, SCHEDULER="auto")

    assert export.code == 0, export.err[-3000:]
    assert f"scheduler: central at {url}" in export.err
    assert f"cap 3 solves (luigid's at {url})" in export.err  # the cap that holds, not luigi.cfg's 4
    history = requests.get(f"{url}/history", timeout=5).text
    assert "DayExport" in history and "RegionExport" in history
    with sqlite3.connect(var / "luigid" / "history.db") as db:
        events = set(db.execute("select t.name, e.event_name from tasks t join task_events e on e.task_id = t.id"))
    assert {("DayExport", "DONE"), ("RegionExport", "RUNNING"), ("RegionExport", "DONE")} <= events
    day_id = next(i for i, t in rpc(url, "task_list", status="DONE").items() if t["name"] == "DayExport")
    metrics = requests.get(f"{url}/metrics", timeout=10).text  # Luigi's task counters and the data dir's
    for line in [
        'luigi_task_done_total{family="DayExport"} 1.0',
        'luigi_task_done_total{family="RegionExport"} 1.0',
        'portal_export_solves_total{outcome="solved"} 1.0',
        "portal_export_cap_configured 3.0",
        "portal_export_store_up 1.0",
    ]:
        assert line + "\n" in metrics, (line, metrics)

    stopped = cli("scheduler-stop")

    assert stopped.code == 0 and f"scheduler: stopped (pid {pid})" in stopped.err
    assert not scheduler_answers(url) and gone(pid)
    assert (var / "luigid" / "state.pickle").exists()
    assert cli("scheduler-stop").err == "scheduler: not running\n"

    assert cli("scheduler").code == 0  # restarted, it has its state back
    assert rpc(url, "task_list", status="DONE")[day_id]["name"] == "DayExport"


def submits_by_day(sb):
    return Counter(parse_qs(urlsplit(t["pageurl"]).query)["day"][0] for t in sb.tasks())


def in_use(sb):
    return sb.stats()["threads"]["in_use"]


@pytest.mark.unmeasured
def test_two_backfills_at_once_share_the_cap_of_one_central_scheduler(live, fast_cfg, luigid, cli, data_dir, tmp_path):
    """Overlapping ranges: shared days are solved once, and each run waits for slots and for the
    other run's work instead of exiting; 2 runs x 4 workers never put more than 4 solves in flight.
    (Luigi's summary may still list tasks the other run did as "not granted run permission" or
    "run by another worker"; the exit code judges by the days.)"""
    # 0.5 s per solve: solves overlap. Tokens valid 20 s and 10 s HTTP timeouts: a loaded machine's
    # slow post or answer is no retry (a second submit for the region), which is not what this is about
    live.configure(solve_s=50, token_validity_s=2000)
    # the clients wait out the paused clock below
    fast_cfg({"captchaai": {"timeout_s": 60, "http_timeout_s": 10, **polls(0.5)}})
    live.pause_clock()  # no solve ends until the cap is full, however slowly a loaded machine submits
    first = cli.start("backfill", "2026-09-01", "2026-09-05", SCHEDULER="central")
    second = cli.start("backfill", "2026-09-03", "2026-09-07", SCHEDULER="central")
    deadline = time.monotonic() + scaled(60)
    while in_use(live) < 4 and time.monotonic() < deadline and None in (first.poll(), second.poll()):
        time.sleep(0.02)

    def asked():  # the requests for work luigid answered: it logs each once answered
        return (tmp_path / "luigid" / "luigid.log").read_text().count("/api/get_work")

    # While nothing ends, a grant beyond the cap would be a fifth region running: luigid marks it so at
    # the grant, which two more requests for work would have made.
    seen = asked()
    while asked() < seen + 2:
        assert time.monotonic() < deadline and None in (first.poll(), second.poll()), "luigid was asked no more"
        time.sleep(0.02)
    running = rpc(luigid, "task_list", status="RUNNING", upstream_status="").values()
    assert sum(t["name"] == "RegionExport" for t in running) == 4, sorted(t["display_name"] for t in running)
    live.resume_clock()

    codes = [first.wait(timeout=scaled(60)), second.wait(timeout=scaled(60))]

    errs = [cli.output(p)[1] for p in (first, second)]
    stats = live.stats()
    why = {"codes": codes, "threads": stats["threads"], "first": errs[0][-2500:], "second": errs[1][-2500:]}
    assert codes == [0, 0], why
    assert "backfill 2026-09-01..2026-09-04: all 4 days complete" in errs[0]
    assert "backfill 2026-09-03..2026-09-06: all 4 days complete" in errs[1]
    assert all(f"scheduler: central at {luigid}" in e for e in errs)
    days = [f"2026-09-0{d}" for d in range(1, 7)]
    assert all((data_dir / f"portal_records_{d}.jsonl").exists() for d in days)
    assert submits_by_day(live) == {d: 4 for d in days}, why  # every region once, whichever run did it
    assert stats["threads"]["peak"] == 4, why  # the cap filled, and never exceeded
    assert stats["tokens"]["accepted"] == 24


def test_the_same_command_is_locked_per_data_dir_not_per_machine(live, fast_cfg, cli, tmp_path):
    """Luigi's own lock (one process per command line) covers one data dir: the same export into
    another data dir runs alongside; into the same one it exits already_running, solving nothing."""
    fast_cfg({"portal": {"regions": "north"}, "captchaai": {"timeout_s": 60}})  # waits out the paused clock
    live.pause_clock()  # the first run holds its lock, solving, until the twin has returned
    mine, other = tmp_path / "mine", tmp_path / "other"
    first = cli.start("export", DAY, PORTAL_DATA_DIR=str(mine))
    alongside = cli.start("export", DAY, PORTAL_DATA_DIR=str(other))
    deadline = time.monotonic() + scaled(20)
    while "Running Worker" not in cli.output(first)[1]:  # past the lock, solving
        assert first.poll() is None and time.monotonic() < deadline, cli.output(first)[1][-2000:]
        time.sleep(0.05)

    twin = cli("export", DAY, PORTAL_DATA_DIR=str(mine))

    assert twin.code == 10, twin.err[-2000:]  # [retcode] already_running
    assert "already running" in twin.out
    assert "Luigi's lock in " in twin.err and "/luigi-locks/" in twin.err
    assert first.poll() is None  # the twin returned while the first run was still solving
    live.resume_clock()
    assert [first.wait(timeout=scaled(30)), alongside.wait(timeout=scaled(30))] == [0, 0]
    assert (mine / f"portal_records_{DAY}.jsonl").exists() and (other / f"portal_records_{DAY}.jsonl").exists()
    assert len(live.tasks()) == 2  # one solve per data dir; the twin sent nothing


@pytest.fixture
def netns():
    """A network namespace of its own (a host with the address 10.18.0.1 on a veth interface, and
    loopback), kept alive by a process of ours; run(argv) runs a command inside it."""
    ip = program("ip", "iproute2")
    if subprocess.run([*unshare("--net"), "true"], capture_output=True).returncode != 0:
        pytest.skip("`unshare --net` cannot make a network namespace here (as root, or in a user namespace)")
    setup = (  # a veth interface; where the kernel has none, the address on lo (still not a loopback one)
        f"{ip} link set lo up && {{ {{ {ip} link add v0 type veth peer name v1 && {ip} addr add 10.18.0.1/24 dev v0"
        f" && {ip} link set v0 up && {ip} link set v1 up; }} 2>/dev/null || {ip} addr add 10.18.0.1/32 dev lo; }}"
        " && echo ready && exec sleep 600"
    )
    holder = subprocess.Popen([*unshare("--net"), "sh", "-c", setup], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "ready\n"

    # an ordinary user enters the user namespace that owns the network one, keeping its own uid
    entered = [] if is_root() else [f"--user=/proc/{holder.pid}/ns/user", "--preserve-credentials"]

    def run(*argv, **env):
        return subprocess.run(
            ["nsenter", *entered, f"--net=/proc/{holder.pid}/ns/net", *map(str, argv)],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    yield run
    holder.kill()
    holder.wait()


@pytest.mark.long
def test_make_scheduler_listens_on_the_address_it_is_given_and_warns_once_beyond_loopback(var, netns):
    """In a namespace of its own, so luigid on another address is reachable by nothing else (and
    port 8082, the default, is free there)."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("make test creates .venv; this runs there")
    env = {"LUIGI_SCHEDULER_URL": "http://ops:pw-1234@10.18.0.1:8082"}  # the port is what it takes from it
    probe = [sys.executable, "-c", "import sys, ops.luigid as s; print(s.answers(sys.argv[1]))"]
    listening = [
        sys.executable,
        "-c",
        "import sys, psutil; p = psutil.Process(int(sys.argv[1]));"
        "print([tuple(c.laddr) for c in p.net_connections('inet') if c.status == psutil.CONN_LISTEN])",
    ]

    wide = netns("make", "-s", "scheduler", "SCHEDULER_BIND=10.18.0.1", **env)

    assert wide.returncode == 0, wide.stderr
    warning = (
        "warning: luigid listens on 10.18.0.1 port 8082 with no authentication: whoever reaches it can change"
        " the captchaai cap, mark tasks done and read every task's parameters; put it behind the authenticating"
        ' proxy of docs/operations.md "luigid on a network, behind a proxy"\n'
    )
    assert wide.stderr.startswith(warning) and wide.stderr.count("warning") == 1
    assert "scheduler: luigid running at http://10.18.0.1:8082 (pid " in wide.stderr
    pid = int((var / "luigid.pid").read_text())
    assert netns(*listening, pid).stdout == "[('10.18.0.1', 8082)]\n"  # seen from inside its namespace
    assert netns(*probe, "http://10.18.0.1:8082").stdout == "True\n"
    assert netns(*probe, "http://127.0.0.1:8082").stdout == "False\n"
    assert "pw-1234" not in wide.stdout + wide.stderr
    stopped = netns("make", "-s", "scheduler-stop", **env)
    assert stopped.returncode == 0 and f"scheduler: stopped (pid {pid})" in stopped.stderr

    default = netns("make", "-s", "scheduler", **env)

    assert default.returncode == 0, default.stderr
    assert "warning" not in default.stderr
    assert "scheduler: luigid running at http://127.0.0.1:8082 (pid " in default.stderr
    pid = int((var / "luigid.pid").read_text())
    assert netns(*listening, pid).stdout == "[('127.0.0.1', 8082)]\n"
    assert netns(*probe, "http://10.18.0.1:8082").stdout == "False\n"  # loopback only
    assert netns(*probe, "http://127.0.0.1:8082").stdout == "True\n"
    assert netns("make", "-s", "scheduler-stop", **env).returncode == 0


@pytest.mark.unmeasured
@pytest.mark.parametrize(
    "bind, why",
    [("10.255.255.1", "Cannot assign requested address"), ("no-such-host.invalid", "Name or service not known")],
)
def test_make_scheduler_refuses_an_address_it_cannot_listen_on_in_one_line(bind, why, var, capsys):
    from ops.cli import main

    port = urlsplit(os.environ["LUIGI_SCHEDULER_URL"]).port
    assert main(["scheduler", "--bind", bind]) == 2
    assert capsys.readouterr().err == f"error: luigid cannot listen on {bind} port {port}: {why}\n"
    assert not (var / "luigid.pid").exists()
