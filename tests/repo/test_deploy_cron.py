"""deploy/crontab: its line, run by /bin/sh in cron's environment on a fresh clone (no var/) against
the sandbox, exports yesterday (UTC) and writes its log; an env file that others may read is refused."""

import datetime
import json
import pwd
import re
import subprocess

import pytest

from sandbox import SANDBOX_KEY
from tests.helpers.cfg import FAST_CLIENT, write_cfg
from tests.helpers.deploy_files import DEPLOY, ENV_FILE, account, clone, installed, server_dir, write_env_file

__all__ = ["account", "server_dir"]  # fixtures
pytestmark = pytest.mark.live
SECRETS = ("CAPTCHAAI_API_KEY", "PORTAL_PASSWORD", "ALERT_WEBHOOK_URL", "AWS_SECRET_ACCESS_KEY", "SMTP_PASSWORD")


def crontab() -> tuple[dict[str, str], dict[str, str]]:
    """deploy/crontab's settings, and its jobs' commands (what follows the five time fields) by
    the program each runs: {"nightly": ..., "prune": ...}."""
    settings, jobs = {}, {}
    for raw in (DEPLOY / "crontab").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        setting = re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*(.*)", line)
        if setting:
            settings[setting[1]] = setting[2]
            continue
        command = line.split(None, 5)[5]
        jobs["nightly" if "deploy/nightly" in command else "prune" if " ops prune" in command else command] = command
    assert sorted(jobs) == ["nightly", "prune"], jobs
    return settings, jobs


def run_cron_line(checkout, env_file, account, host_zone="UTC", job="nightly"):
    """The job's command as cron runs it: /bin/sh -c, as the crontab's owner, with cron's environment
    (PATH, HOME, SHELL, LOGNAME and the crontab's settings) from the checkout's directory. TZ stands
    for the host's zone, which cron's jobs inherit from /etc/localtime."""
    settings, jobs = crontab()
    entry = pwd.getpwuid(account.uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir, "SHELL": "/bin/sh", "LOGNAME": entry.pw_name}
    env.update(settings, TZ=host_zone)
    line = installed(jobs[job], checkout, env_file, account)
    return subprocess.run(
        account.command(["/bin/sh", "-c", line]), cwd=checkout, env=env, capture_output=True, text=True, timeout=90
    )


def deployment_env(server, sb, account, **more):
    fast = write_cfg(server / "etc" / "fast.cfg", FAST_CLIENT)
    values = {
        "CAPTCHAAI_API_KEY": SANDBOX_KEY,
        "CAPTCHAAI_API_BASE": sb.captchaai_url,
        "PORTAL_BASE_URL": sb.portal_url,
        "LUIGI_CONFIG_PATH": str(fast),
        "SCHEDULER": "local",
        "NIGHTLY_DAYS": "1",
        **more,
    }
    account.own(server / "etc")
    return write_env_file(server / "etc" / "env", values, account)


def zone_on_another_date():
    """A host's zone whose date differs from UTC's now: 12 hours behind UTC before noon (UTC),
    14 hours ahead after (a local `date` would name a day that has not ended in UTC)."""
    return "Etc/GMT+12" if datetime.datetime.now(datetime.timezone.utc).hour < 12 else "Pacific/Kiritimati"


def utc_today():
    return datetime.datetime.now(datetime.timezone.utc).date()


def test_the_crontab_is_utc_and_holds_no_secret():
    settings, jobs = crontab()
    assert settings.get("CRON_TZ") == "UTC"
    assert all(f"deploy/with-env {ENV_FILE} " in command for command in jobs.values())
    text = (DEPLOY / "crontab").read_text()
    assert not [name for name in SECRETS if re.search(rf"^\s*[^#]*\b{name}\s*=", text, re.M)]


def test_the_cron_line_exports_yesterday_utc_on_a_fresh_clone_and_writes_its_log(sandbox, server_dir, account):
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    assert not (checkout / "var").exists()
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account)
    done = run_cron_line(checkout, env_file, account, host_zone=zone_on_another_date())
    assert done.returncode == 0, done
    assert (done.stdout, done.stderr) == ("", "")  # cron would mail anything: all of it is in the log
    today = utc_today()
    yesterday = today - datetime.timedelta(days=1)
    data = checkout / "data"
    assert sorted(p.name for p in data.glob("portal_records_*.jsonl")) == [f"portal_records_{yesterday}.jsonl"]
    health = json.loads((data / f"portal_records_{yesterday}.health.json").read_text())
    assert set(health["regions"]) == {"north", "south", "east", "west"}
    log = (checkout / "var" / "log" / "nightly.log").read_text()
    assert f"backfill {yesterday}..{today}" in log
    assert log.rstrip().endswith(f"backfill {yesterday}: complete"), log[-2000:]
    assert SANDBOX_KEY not in log

    pruned = run_cron_line(checkout, env_file, account, job="prune")  # the weekly job, into the same log
    assert (pruned.returncode, pruned.stdout, pruned.stderr) == (0, "", ""), pruned
    added = (checkout / "var" / "log" / "nightly.log").read_text()[len(log) :]
    assert added.startswith("prune: removed "), added


@pytest.mark.parametrize("mode", [0o640, 0o604], ids=["group", "others"])
def test_the_cron_line_refuses_an_env_file_others_may_read(sandbox, server_dir, account, mode):
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account)
    env_file.chmod(mode)
    done = run_cron_line(checkout, env_file, account)
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and f"has mode {mode:o}" in lines[0] and "chmod 600" in lines[0], done.stderr
    assert not (checkout / "data").exists() and not (checkout / "var").exists()
    assert sb.stats()["requests"] == {}
