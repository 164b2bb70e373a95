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


def run_cron_line(checkout, env_file, account, host_zone="UTC", job="nightly", **more):
    """The job's command as cron runs it: /bin/sh -c, as the crontab's owner, with cron's environment
    (PATH, HOME, SHELL, LOGNAME and the crontab's settings) and cron's umask 022 from the checkout's
    directory. TZ stands for the host's zone, which cron's jobs inherit from /etc/localtime."""
    settings, jobs = crontab()
    entry = pwd.getpwuid(account.uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir, "SHELL": "/bin/sh", "LOGNAME": entry.pw_name}
    env.update(settings, TZ=host_zone, **more)
    line = installed(jobs[job], checkout, env_file, account)
    return subprocess.run(
        account.command(["/bin/sh", "-c", f"umask 022 && {line}"]),
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
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


def test_the_crontab_is_utc_mails_someone_and_holds_no_secret():
    settings, jobs = crontab()
    assert settings.get("CRON_TZ") == "UTC"
    assert "@" in settings.get("MAILTO", "")  # a failed night's line goes to an address, not the account's mailbox
    assert all(f"deploy/with-env --log var/log/nightly.log {ENV_FILE} " in command for command in jobs.values())
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
    # cron's umask is 022: the job's files get the units' UMask=0077 all the same
    made = [checkout / "var" / "log" / "nightly.log", data / f"portal_records_{yesterday}.jsonl", data]
    assert {str(p): oct(p.stat().st_mode & 0o077) for p in made} == {str(p): "0o0" for p in made}
    log = (checkout / "var" / "log" / "nightly.log").read_text()
    assert f"backfill {yesterday}..{today}" in log
    assert log.rstrip().endswith(f"backfill {yesterday}: complete"), log[-2000:]
    assert SANDBOX_KEY not in log
    assert "Warning" not in log, log  # no Python warning in a night's log (Luigi's param_name)

    pruned = run_cron_line(checkout, env_file, account, job="prune")  # the weekly job, into the same log
    assert (pruned.returncode, pruned.stdout, pruned.stderr) == (0, "", ""), pruned
    added = (checkout / "var" / "log" / "nightly.log").read_text()[len(log) :]
    assert added.startswith("prune: removed "), added


def refused_before_the_job(done, checkout, sb, reason):
    """A cron run that failed before its job started: its one-line reason in var/log/nightly.log, and
    one line to cron's mail (stderr: cron mails it to MAILTO); nothing exported, no request sent."""
    assert done.returncode == 2, done
    log = (checkout / "var" / "log" / "nightly.log").read_text().splitlines()
    assert len(log) == 1 and reason in log[0] and " UTC: error: " in log[0], log
    mail = done.stderr.splitlines()
    assert done.stdout == "" and len(mail) == 1 and reason in mail[0], done
    assert not (checkout / "data").exists()
    assert sb.stats()["requests"] == {}
    return log[0]


@pytest.mark.parametrize("mode", [0o640, 0o604], ids=["group", "others"])
def test_the_cron_line_refuses_an_env_file_others_may_read(sandbox, server_dir, account, mode):
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account)
    env_file.chmod(mode)
    done = run_cron_line(checkout, env_file, account)
    line = refused_before_the_job(done, checkout, sb, f"has mode {mode:o}")
    assert line.startswith("with-env: ") and "chmod 600" in line


@pytest.mark.parametrize("days", ["0", "35d", "-3"])
def test_a_cron_run_with_a_bad_nightly_days_says_why_in_its_log(sandbox, server_dir, account, days):
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account, NIGHTLY_DAYS=days)
    done = run_cron_line(checkout, env_file, account)
    line = refused_before_the_job(done, checkout, sb, f"NIGHTLY_DAYS={days}: give a whole number of days")
    assert line.startswith("nightly: ")


def test_a_cron_run_without_a_venv_says_why_in_its_log(sandbox, server_dir, account):
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    (checkout / ".venv").unlink()
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account)
    done = run_cron_line(checkout, env_file, account)
    refused_before_the_job(done, checkout, sb, "no .venv/bin/python in")


def test_nightly_days_with_a_leading_zero_is_decimal(sandbox, server_dir, account):
    """035 is 35 days (not refused, not octal 29): the backfill's range says so; without a key the
    backfill itself is refused before any request, so no 35 days are exported here."""
    sb = sandbox()
    checkout = clone(server_dir / "portal-export", account)
    (server_dir / "etc").mkdir()
    env_file = deployment_env(server_dir, sb, account, NIGHTLY_DAYS="035", CAPTCHAAI_API_KEY="")
    done = run_cron_line(checkout, env_file, account)
    today = utc_today()
    assert done.returncode == 2, done
    log = (checkout / "var" / "log" / "nightly.log").read_text()
    assert f"backfill {today - datetime.timedelta(days=35)}..{today}" in log, log
    assert "CAPTCHAAI_API_KEY is not set" in log and "CAPTCHAAI_API_KEY is not set" in done.stderr
    assert sb.stats()["requests"] == {}
