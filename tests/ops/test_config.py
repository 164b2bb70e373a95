"""Configuration mistakes are refused in one line before any request (tasks/config_check.py), and `make config`
prints every value with where it came from, secrets masked (ops/config_show.py)."""

import datetime
import os
import subprocess
import sys

import luigi
import luigi.configuration
import pytest
import responses

from ops.cli import main
from sandbox import SANDBOX_KEY
from tasks import config, config_check
from tests import ROOT
from tests.helpers.cfg import FAST_CLIENT, TEST_KEY, write_cfg

YESTERDAY = str(datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1))
TYPOS = [("portal", "base_ulr", "base_url"), ("captchaai", "first_pol_s", "first_poll_s")]


@pytest.fixture
def no_network():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield rs
        assert len(rs.calls) == 0, [c.request.url for c in rs.calls]


def ops(*argv, **env):
    """`python -m ops *argv` from the repository root, this process's environment and `env` on top."""
    return subprocess.run(
        [sys.executable, "-m", "ops", *argv], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )


@pytest.mark.parametrize("section, typo, meant", TYPOS)
def test_a_typo_in_a_key_is_refused_naming_it_and_the_key_meant_with_no_request_sent(
    section, typo, meant, live, cli, tmp_path
):
    layered = write_cfg(tmp_path / "site.cfg", {**FAST_CLIENT, section: {**FAST_CLIENT.get(section, {}), typo: 1}})
    run = cli("export", YESTERDAY, LUIGI_CONFIG_PATH=str(layered))
    assert run.code == 2, run
    # one line, Luigi's own UnconsumedParameterWarning never printed: the refusal comes before any class reads it
    assert run.err == (
        f"error: [{section}] {typo} (in {layered}) is not a key the project defines: did you mean {meant}?\n"
    ), run.err
    assert run.out == "" and live.stats()["requests"] == {}


@pytest.mark.parametrize(
    "argv",
    [["backfill", "2026-09-01", "2026-09-02"], ["retry-unsolvable", "2026-09-01"], ["probe", "2026-09-01"]]
    + [["plan"], ["state"], ["prune"], ["report"], ["clear-breaker"], ["alert-test"], ["metrics-server"]],
)
def test_every_command_that_reads_the_configuration_refuses_a_typo_first(
    argv, monkeypatch, luigi_cfg, capsys, no_network
):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg("alerts", "p95_warn", "30")
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "error: [alerts] p95_warn is not a key the project defines: did you mean p95_warn_s?\n"
    )


def test_a_key_far_from_any_names_the_keys_the_section_takes(luigi_cfg, capsys, no_network):
    luigi_cfg("alerts", "colour", "blue")
    assert main(["state"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: [alerts] colour is not a key the project defines: the keys it takes: p95_warn_s, webhook_timeout_s\n"
    )


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("captchaai", "timeout_s", "2m", "[captchaai] timeout_s = '2m': give a number"),
        ("captchaai", "first_poll_s", "-1", "[captchaai] first_poll_s = -1.0: give 0 or more seconds"),
        ("captchaai", "poll_every_s", "0", "[captchaai] poll_every_s = 0.0: give a positive number of seconds"),
        ("captchaai", "follow_plan", "maybe", "[captchaai] follow_plan = 'maybe': give true or false"),
        ("portal", "attempts", "0", "[portal] attempts = 0: give at least 1 (the first attempt counts)"),
        ("portal", "attempts", "2.5", "[portal] attempts = '2.5': give a whole number"),
        ("portal", "max_unsolvable_ratio", "1.5", "[portal] max_unsolvable_ratio = 1.5: give a ratio from 0 to 1"),
        ("portal", "metrics_window_days", "0", "[portal] metrics_window_days = 0: give at least 1 day"),
        ("alerts", "webhook_timeout_s", "nan", "[alerts] webhook_timeout_s = nan: give a positive number of seconds"),
        ("resources", "captchaai", "0", "[resources] captchaai = 0: give at least 1 solve in flight"),
        ("resources", "captchaai", "four", "[resources] captchaai: give a whole number of solves"),
    ],
)
def test_a_value_that_cannot_work_is_refused_in_one_line(
    section, key, value, message, monkeypatch, luigi_cfg, capsys, no_network
):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg(section, key, value)
    assert main(["export", "2026-09-01"]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_a_dashed_key_is_refused_for_the_underscored_one_that_shadows_it(request, capsys, no_network):
    """Luigi reads `first-poll-s` only where no file sets `first_poll_s`, and luigi.cfg sets every key."""
    cfg = luigi.configuration.get_config()  # not luigi_cfg, whose get() of a dashed key reads the underscored one
    cfg.set("captchaai", "first-poll-s", "1")
    request.addfinalizer(lambda: cfg.remove_option("captchaai", "first-poll-s"))
    assert main(["state"]) == 2
    err = capsys.readouterr().err
    assert err == "error: [captchaai] first-poll-s is not a key the project defines: did you mean first_poll_s?\n"


def test_a_parameter_added_to_a_section_is_a_key_at_once(monkeypatch, luigi_cfg):
    """The keys come off the luigi.Config classes: a new one needs no list kept elsewhere."""
    luigi_cfg("portal", "key_of_a_later_release", "1")
    with pytest.raises(config.ConfigError, match="key_of_a_later_release"):
        config_check.check()
    added = luigi.Parameter(default="0")
    added.__set_name__(config.portal, "key_of_a_later_release")  # what a class body does for its parameters
    monkeypatch.setattr(config.portal, "key_of_a_later_release", added, raising=False)
    config_check.check()


def test_a_layered_file_that_does_not_exist_is_refused_without_luigis_warning(tmp_path):
    done = ops("state", LUIGI_CONFIG_PATH=str(tmp_path / "site.cfg"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: LUIGI_CONFIG_PATH={tmp_path / 'site.cfg'}: no such file\n"


def listing(text):
    """{name: (origin, value)} of `make config`'s lines."""
    out = {}
    for line in text.splitlines():
        origin, _, setting = line.partition("\t")
        name, _, value = setting.partition("=")
        assert name not in out, line
        out[name] = (origin, value)
    return out


SECRETS = {
    "CAPTCHAAI_API_KEY": SANDBOX_KEY,
    "PORTAL_PASSWORD": "pw-portal-9876",
    "ALERT_WEBHOOK_URL": "https://hooks.example/services/T0/B0/secret-hook-555",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-4321",
}


def test_make_config_prints_every_value_with_where_it_came_from_and_masks_the_secrets(tmp_path):
    site = write_cfg(tmp_path / "site.cfg", {"portal": {"regions": "north,south"}, "resources": {"captchaai": 14}})
    env = {"LUIGI_CONFIG_PATH": str(site), "PORTAL_BASE_URL": "https://reports.acme.example", **SECRETS}
    env["LUIGI_SCHEDULER_URL"] = "https://ops:sched-pw-777@scheduler.internal:8443"
    done = ops("config", **env)
    assert (done.returncode, done.stderr) == (0, ""), done
    shown = listing(done.stdout)
    names = {f"{s}.{k}" for s, cls in config_check.sections().items() for k in config_check.defined(cls)}
    assert names | {"resources.captchaai"} <= set(shown) and {"portal.base_url", "alerts.p95_warn_s"} <= names
    assert shown["portal.regions"] == (f"file:{site}", "north,south")  # the layered file
    assert shown["resources.captchaai"] == (f"file:{site}", "14")
    assert shown["portal.attempts"] == ("file:luigi.cfg", "4")  # the checkout's defaults
    assert shown["portal.store_retry_s"] == ("default", "120.0")  # no file sets it
    assert shown["portal.base_url"] == ("env:PORTAL_BASE_URL", "https://reports.acme.example")
    assert shown["portal.data_dir"] == ("env:PORTAL_DATA_DIR", os.environ["PORTAL_DATA_DIR"])
    assert shown["captchaai.api_base"] == ("file:luigi.cfg", "https://ocr.captchaai.com")
    assert shown["SCHEDULER"] == ("default", "auto")
    assert shown["LUIGI_SCHEDULER_URL"] == ("env:LUIGI_SCHEDULER_URL", "https://ops:***@scheduler.internal:8443")
    for name in SECRETS:
        assert shown[name] == (f"env:{name}", "********"), name
    assert shown["PORTAL_USERNAME"] == ("default", "") and shown["SMTP_PASSWORD"] == ("unset", "")
    assert not [s for s in [*SECRETS.values(), "sched-pw-777", "secret-hook-555"] if s in done.stdout]


def test_make_config_lists_then_says_the_mistake_and_exits_2(tmp_path):
    site = write_cfg(tmp_path / "site.cfg", {"portal": {"base_ulr": "https://reports.acme.example"}})
    done = subprocess.run(
        ["make", "-s", "config"],
        cwd=ROOT,
        env={**os.environ, "LUIGI_CONFIG_PATH": str(site)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert listing(done.stdout)["portal.base_url"] == ("file:luigi.cfg", "https://reports.partner.example")
    mistake = f"error: [portal] base_ulr (in {site}) is not a key the project defines: did you mean base_url?"
    assert done.stderr.splitlines()[0] == mistake, done.stderr
