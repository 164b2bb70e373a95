"""The suite never joins a luigid it did not start, whatever SCHEDULER and LUIGI_SCHEDULER_URL say in the
environment it inherits (a developer's shell on a deployment's host): tests/conftest.py's `isolated`."""

import datetime
import os
import subprocess
import sys

import pytest

from sandbox import SANDBOX_KEY
from tests import ROOT
from tests.helpers.cfg import FAST_CLIENT, write_cfg
from tests.helpers.runs import Luigid

pytestmark = pytest.mark.live


def test_a_run_with_the_schedulers_defaults_runs_locally(sandbox, cli, tmp_path):
    sb = sandbox()
    yesterday = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)
    env = {"CAPTCHAAI_API_KEY": SANDBOX_KEY, "CAPTCHAAI_API_BASE": sb.captchaai_url, "PORTAL_BASE_URL": sb.portal_url}
    env["LUIGI_CONFIG_PATH"] = str(write_cfg(tmp_path / "fast.cfg", FAST_CLIENT))
    assert os.environ["LUIGI_SCHEDULER_URL"] != "http://127.0.0.1:8082"  # not the default a deployment listens on
    run = cli("export", yesterday, **env)  # SCHEDULER and LUIGI_SCHEDULER_URL as the suite left them
    assert run.code == 0, run
    assert f"scheduler: local (no central scheduler answers at {os.environ['LUIGI_SCHEDULER_URL']})" in run.err


@pytest.mark.unmeasured
def test_the_suite_joins_no_luigid_of_the_environment_it_inherits(tmp_path):
    production = Luigid(tmp_path / "production")  # a deployment's, on this host
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_", "COVERAGE_"))}
        env.update(SCHEDULER="auto", LUIGI_SCHEDULER_URL=production.url)
        test = "tests/ops/test_isolation.py::test_a_run_with_the_schedulers_defaults_runs_locally"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", test],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        assert production.rpc("worker_list") == [] and production.rpc("task_list", status="", upstream_status="") == {}
    finally:
        production.stop()
