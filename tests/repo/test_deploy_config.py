"""deploy/'s example env file and site.cfg, filled in as an operator fills them in, loaded through
deploy/with-env and LUIGI_CONFIG_PATH as the crontab and the units load them: every key a deployment
sets takes effect, and `make plan` against them (the sandbox standing for CaptchaAI) is content."""

import json
import os
import re
import subprocess
import sys

import pytest

from sandbox import SANDBOX_KEY
from tests.helpers.deploy_files import DEPLOY, ROOT, VENV, Account, account, installed, load_env_file

__all__ = ["account"]  # fixtures
pytestmark = pytest.mark.live
SHOW = """
import json, luigi.configuration, luigi.interface
from tasks import config
cfg = luigi.configuration.get_config()
portal = config.portal()
print(json.dumps({
    "base_url": portal.base_url, "regions": config.regions(), "login_path": portal.login_path,
    "data_dir": config.data_dir_text(), "keep_state_days": portal.keep_state_days,
    "captchaai": cfg.getint("resources", "captchaai"), "workers": luigi.interface.core().workers,
    "receiver": cfg.get("email", "receiver"), "method": cfg.get("email", "method"),
}))
"""


def filled_in(tmp_path, account: Account, s3=False, **more):
    """The example env file and site.cfg as installed: the key set, the paths of this server."""
    checkout = tmp_path / "portal-export"
    site = installed((DEPLOY / "site.cfg.example").read_text(), checkout, tmp_path / "env", account)
    if s3:  # the data dir of the commented line, in place of the local one
        site = re.sub(r"^#(data_dir = s3://.*)$", r"\1", re.sub(r"^data_dir = .*\n", "", site, flags=re.M), flags=re.M)
    (tmp_path / "site.cfg").write_text(site)
    text = installed((DEPLOY / "portal-export.env.example").read_text(), checkout, tmp_path / "env", account)
    text = text.replace("/etc/portal-export/site.cfg", str(tmp_path / "site.cfg"))
    text = re.sub(r"^CAPTCHAAI_API_KEY=$", f"CAPTCHAAI_API_KEY={SANDBOX_KEY}", text, flags=re.M)
    env_file = tmp_path / "env"
    env_file.write_text(text + "".join(f"{k}={v}\n" for k, v in more.items()))
    env_file.chmod(0o600)
    account.own(env_file)
    return env_file


def effective(env_file):
    """The settings a command sees with this env file, read by the project's own config code."""
    env = {"PATH": os.environ["PATH"], **load_env_file(env_file)}
    done = subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_examples_set_every_key_a_deployment_sets(tmp_path, account):
    env_file = filled_in(tmp_path, account)
    loaded = load_env_file(env_file)
    assert loaded["CAPTCHAAI_API_KEY"] == SANDBOX_KEY and loaded["LUIGI_CONFIG_PATH"] == str(tmp_path / "site.cfg")
    assert "PORTAL_PASSWORD" not in loaded  # commented out: a portal without a login
    assert effective(env_file) == {
        "base_url": "https://reports.partner.example",
        "regions": ["north", "south", "east", "west"],
        "login_path": "/login",
        "data_dir": str(tmp_path / "portal-export" / "data"),
        "keep_state_days": 30.0,
        "captchaai": 14,  # a STANDARD plan: 15 threads, one spare
        "workers": 28,
        "receiver": "data-ops@example.com",
        "method": "smtp",
    }


def test_the_example_s3_data_dir_is_taken_as_an_object_store(tmp_path, account):
    assert effective(filled_in(tmp_path, account, s3=True))["data_dir"] == "s3://acme-partner-exports/portal"


def test_make_plan_is_content_with_the_examples_on_a_standard_plan(tmp_path, account, sandbox):
    sb = sandbox(threads=15)
    env_file = filled_in(tmp_path, account, CAPTCHAAI_API_BASE=sb.captchaai_url, SCHEDULER="local")
    done = subprocess.run(
        # in the suite's venv: .venv, or make test-pythons' .venv-X.Y (VENV), which has no .venv beside it
        account.command(["/bin/sh", str(DEPLOY / "with-env"), str(env_file), "make", "-s", "plan", f"VENV={VENV}"]),
        cwd=ROOT,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "plan: 15 threads, 0 working now; cap 14 solves ([resources] captchaai), 28 workers: ok" in done.stderr
    assert SANDBOX_KEY not in done.stdout + done.stderr
