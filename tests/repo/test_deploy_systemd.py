"""deploy/'s systemd units: `systemd-analyze verify` finds nothing, and each unit's ExecStart, run as
the unit runs it (its WorkingDirectory, EnvironmentFile and user), does its work: luigid and the
metrics server answer and stop on SIGTERM within 10 s, and the nightly run exports yesterday (UTC)."""

import datetime
import os
import subprocess

import pytest
import requests

from sandbox import SANDBOX_KEY
from sandbox.luigid import wait_for
from sandbox.ports import free_port
from tests.helpers.cfg import FAST_CLIENT, write_cfg
from tests.helpers.deploy_files import (
    ACCOUNT,
    CHECKOUT,
    DEPLOY,
    ENV_FILE,
    VENV,
    Service,
    account,
    clone,
    exec_lines,
    exec_start,
    server_dir,
    unit,
    write_env_file,
)
from tests.helpers.programs import program
from tests.helpers.speed import scaled

__all__ = ["account", "server_dir"]  # fixtures
pytestmark = pytest.mark.live
SERVICES = [f"portal-export-{name}.service" for name in ("luigid", "metrics", "nightly", "prune")]
TIMERS = {"portal-export-nightly.timer": "03:00:00 UTC", "portal-export-prune.timer": "04:30:00 UTC"}
UNITS = sorted(p.name for p in DEPLOY.glob("*.service")) + sorted(p.name for p in DEPLOY.glob("*.timer"))


def test_systemd_analyze_verify_finds_nothing(tmp_path):
    """Each unit as installed on a server whose checkout is this one: verify checks that ExecStart's
    program exists, so /srv/portal-export is this checkout (its .venv the suite's venv, which under
    make test-pythons is .venv-X.Y); the account need not exist."""
    systemd_analyze = program("systemd-analyze", "systemd")
    assert sorted(SERVICES) + sorted(TIMERS) == UNITS
    checkout = tmp_path / "portal-export"
    (checkout / "var").mkdir(parents=True)
    for name, target in ((".venv", VENV), ("deploy", DEPLOY), ("docs", DEPLOY.parent / "docs")):
        (checkout / name).symlink_to(target)
    for name in UNITS:
        (tmp_path / name).write_text((DEPLOY / name).read_text().replace(CHECKOUT, str(checkout)))
    done = subprocess.run(
        [systemd_analyze, "verify", *(str(tmp_path / n) for n in UNITS)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("name", SERVICES)
def test_each_service_runs_in_the_foreground_as_the_account_and_is_confined(name):
    service = unit(name)["Service"]
    assert service["Type"] == ["simple"] and service["User"] == [ACCOUNT] and service["Group"] == [ACCOUNT]
    assert service["EnvironmentFile"] == [ENV_FILE] and service["WorkingDirectory"] == [CHECKOUT]
    assert service["ExecStart"][0].split()[0].startswith(CHECKOUT + "/")  # the venv's program, no activate
    # UMask: the modes deploy/with-env gives cron's jobs (umask 077)
    for key, value in [
        ("NoNewPrivileges", "true"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "true"),
        ("UMask", "0077"),
    ]:
        assert service[key] == [value], key
    if name != "portal-export-metrics.service":  # the metrics server only reads
        assert f"{CHECKOUT}/var" in " ".join(service["ReadWritePaths"])
    if name in ("portal-export-luigid.service", "portal-export-metrics.service"):  # long-running
        assert service["Restart"] == ["on-failure"]
        assert unit(name)["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("name", sorted(TIMERS))
def test_the_timers_fire_at_night_in_utc_and_catch_up_after_downtime(name):
    timer = unit(name)["Timer"]
    assert timer["Persistent"] == ["true"] and timer["Unit"] == [name.replace(".timer", ".service")]
    (calendar,) = timer["OnCalendar"]
    env = {**os.environ, "TZ": "Pacific/Kiritimati"}  # the host's zone changes nothing
    done = subprocess.run(
        [program("systemd-analyze", "systemd"), "calendar", calendar], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and calendar.endswith(" UTC") and TIMERS[name] in done.stdout, done.stdout


def env_values(server, **more):
    fast = write_cfg(server / "etc" / "fast.cfg", FAST_CLIENT)
    return {"LUIGI_CONFIG_PATH": str(fast), "SCHEDULER": "local", **more}


@pytest.fixture
def installation(server_dir, account):
    """(checkout, env_file directory): a fresh clone and /etc/portal-export in the server's dir."""
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    return checkout


@pytest.mark.parametrize("name", SERVICES)
@pytest.mark.parametrize("mode", [0o644, 0o640], ids=["others", "group"])
def test_each_service_refuses_an_env_file_others_may_read_before_it_starts(
    name, mode, installation, server_dir, account
):
    """EnvironmentFile= reads any file: luigid's, the metrics server's and the prune's units check it
    first (ExecStartPre, deploy/with-env), the nightly unit's ExecStart is deploy/with-env itself."""
    env_file = write_env_file(server_dir / "etc" / "env", env_values(server_dir), account)
    # what systemd runs first: the ExecStartPre lines, else ExecStart (read while the file is still 0600)
    first = exec_lines(name, installation, env_file, account, "ExecStartPre") or [
        exec_start(name, installation, env_file, account)
    ]
    argv, env, workdir = first[0]
    assert argv[-3:-1] == [f"{installation}/deploy/with-env", str(env_file)], argv
    env_file.chmod(mode)
    refused = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert refused is not None and refused.returncode == 2, refused
    lines = (refused.stdout + refused.stderr).splitlines()
    assert len(lines) == 1 and f"has mode {mode:o}" in lines[0] and "chmod 600" in lines[0], lines
    assert not (installation / "var").exists() and not (installation / "data").exists()  # nothing ran


def test_the_luigid_unit_answers_keeps_var_and_stops_on_sigterm(installation, server_dir, account):
    url = f"http://127.0.0.1:{free_port()}"
    env_file = write_env_file(server_dir / "etc" / "env", env_values(server_dir, LUIGI_SCHEDULER_URL=url), account)
    luigid = Service("portal-export-luigid.service", installation, env_file, account, server_dir / "luigid.out")
    try:
        assert wait_for(lambda: answers(f"{url}/api/task_list"), scaled(30)), luigid.log.read_text()
        assert os.stat(f"/proc/{luigid.proc.pid}").st_uid == account.uid
        assert requests.get(f"{url}/no-such-page", timeout=5).status_code == 404  # logged: a failed request
        log = installation / "var" / "log" / "luigid.log"
        assert wait_for(lambda: "404 GET /no-such-page" in log.read_text(), scaled(5)), log.read_text()
        again = Service("portal-export-luigid.service", installation, env_file, account, server_dir / "again.out")
        assert again.proc.wait(timeout=scaled(30)) == 1  # one luigid per port: a second start is refused
        assert again.log.read_text().startswith(f"error: a central scheduler is already running at {url}")
    finally:
        code, seconds = luigid.stop()
    assert code == 0 and seconds < scaled(10), (code, seconds, luigid.log.read_text())
    var = installation / "var"
    assert (var / "luigid" / "state.pickle").exists()  # saved on the way out, where make scheduler keeps it
    assert "Scheduler instance shutting down" in (var / "log" / "luigid.log").read_text()


def answers(url):
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_the_metrics_unit_serves_the_data_dir_and_stops_on_sigterm(installation, server_dir, account):
    port = free_port()
    values = env_values(server_dir, METRICS_PORT=str(port), METRICS_BIND="127.0.0.1")
    env_file = write_env_file(server_dir / "etc" / "env", values, account)
    metrics = Service("portal-export-metrics.service", installation, env_file, account, server_dir / "metrics.out")
    try:
        assert wait_for(lambda: answers(f"http://127.0.0.1:{port}/metrics"), scaled(30)), metrics.log.read_text()
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "portal_export_days_missing 35.0" in text, text
    finally:
        code, seconds = metrics.stop()
    assert code == 0 and seconds < scaled(10), (code, seconds, metrics.log.read_text())


def test_the_nightly_unit_exports_yesterday_utc(installation, server_dir, account, sandbox):
    sb = sandbox()
    values = env_values(
        server_dir,
        CAPTCHAAI_API_KEY=SANDBOX_KEY,
        CAPTCHAAI_API_BASE=sb.captchaai_url,
        PORTAL_BASE_URL=sb.portal_url,
        NIGHTLY_DAYS="1",
    )
    env_file = write_env_file(server_dir / "etc" / "env", values, account)
    nightly = Service("portal-export-nightly.service", installation, env_file, account, server_dir / "nightly.out")
    code = nightly.proc.wait(timeout=scaled(90))
    out = nightly.log.read_text()
    yesterday = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)
    assert code == 0, out[-3000:]
    assert out.rstrip().endswith(f"backfill {yesterday}: complete"), out[-3000:]  # to the journal
    assert (installation / "data" / f"portal_records_{yesterday}.jsonl").exists()
    assert SANDBOX_KEY not in out


def test_the_prune_unit_prunes_the_data_dir(installation, server_dir, account):
    env_file = write_env_file(server_dir / "etc" / "env", env_values(server_dir), account)
    prune = Service("portal-export-prune.service", installation, env_file, account, server_dir / "prune.out")
    assert prune.proc.wait(timeout=scaled(60)) == 0, prune.log.read_text()
    assert prune.log.read_text().startswith("prune: removed nothing"), prune.log.read_text()
