"""Bad operator input is refused with one line before any request leaves the machine."""

import datetime
import os
import subprocess

import pytest
import responses

from ops.cli import main
from tests import ROOT  # noqa: E402
from tests.helpers.cfg import TEST_KEY


@pytest.fixture
def no_network():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield rs
        assert len(rs.calls) == 0, [c.request.url for c in rs.calls]


TOMORROW = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=2)).isoformat()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "2026-13-45"], "DAY='2026-13-45' is not a date"),
        (["export", ""], "DAY is required"),
        (["export", "2026-9-1"], "is not a date"),
        (["export", TOMORROW], "is in the future"),
        (["backfill", "2026-09-10", "2026-09-01"], "must be before STOP"),
        (["backfill", "2026-09-01", "2026-09-01"], "must be before STOP"),
        (["backfill", "2026-09-01", "nope"], "STOP='nope' is not a date"),
        (["retry-unsolvable", "2026-02-30"], "is not a date"),
    ],
)
def test_bad_dates_are_refused_in_one_line(argv, message, monkeypatch, capsys, no_network):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("error: ")


def test_missing_key_is_refused_before_any_request(capsys, no_network):
    assert main(["export", "2026-09-01"]) == 2
    err = capsys.readouterr().err
    assert err == "error: CAPTCHAAI_API_KEY is not set: export it with your CaptchaAI account key\n"


@pytest.mark.parametrize("bad", ["../etc", "mid dle", "süd", "a/b", "x.y"])
def test_a_region_name_beyond_letters_digits_dash_underscore_is_refused(
    bad, monkeypatch, luigi_cfg, capsys, no_network
):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg("portal", "regions", f"north,{bad}")
    assert main(["export", "2026-09-01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[portal] regions" in err and repr(bad) in err


def test_repeated_region_names_are_refused(monkeypatch, luigi_cfg, capsys, no_network):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg("portal", "regions", "north,North-2,north")
    assert main(["export", "2026-09-01"]) == 2
    assert "distinct" in capsys.readouterr().err


def test_unknown_scheduler_mode_is_refused(monkeypatch, capsys, no_network):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("SCHEDULER", "cloud")
    assert main(["export", "2026-09-01"]) == 2
    assert "SCHEDULER='cloud'" in capsys.readouterr().err


def test_central_scheduler_required_but_absent_fails(monkeypatch, capsys):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("SCHEDULER", "central")
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    assert main(["export", "2026-09-01"]) == 2
    assert "no central scheduler answers at http://127.0.0.1:9" in capsys.readouterr().err


@pytest.mark.unmeasured
def test_make_export_refuses_a_bad_day_through_the_makefile(tmp_path):
    """The contract's own command line, exit code and single line."""
    venv = ROOT / ".venv" / "bin" / "python"
    if not venv.exists():
        pytest.skip("make test creates .venv; this runs there")
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "export", "DAY=2026-13-45"],
        capture_output=True,
        text=True,
        env={**os.environ, "CAPTCHAAI_API_KEY": TEST_KEY, "PORTAL_DATA_DIR": str(tmp_path)},
    )
    assert proc.returncode != 0
    assert "error: DAY='2026-13-45' is not a date: give YYYY-MM-DD" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_python_dash_m_runs_the_commands(tmp_path):
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ops", "export", "2026-13-45"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "CAPTCHAAI_API_KEY": TEST_KEY, "PORTAL_DATA_DIR": str(tmp_path)},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: DAY='2026-13-45' is not a date"), proc.stderr
    assert not any(tmp_path.iterdir())


def test_report_reads_the_configured_data_dir(monkeypatch, luigi_cfg, tmp_path, capsys):
    """`make report` finds the health files where the exports put them, [portal] data_dir included."""
    import json

    from portal_export.health import day_health

    data = tmp_path / "configured"
    data.mkdir()
    monkeypatch.delenv("PORTAL_DATA_DIR")
    luigi_cfg("portal", "data_dir", str(data))
    facts = {
        "status": "ok",
        "rows": 3,
        "task_ids": ["1"],
        "solve_seconds": 20.0,
        "attempts": 1,
        "refused_tokens": 0,
        "transient_errors": [],
        "idle_slot_seconds": 0.0,
    }
    health = day_health("2026-09-01", ["north"], {"north": facts})
    (data / "portal_records_2026-09-01.health.json").write_text(json.dumps(health))
    assert main(["report"]) == 0
    assert (data / "report" / "solve_health.csv").read_text().splitlines()[1].startswith("2026-09-01,ok,20")
    assert (data / "report" / "solve_health.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (data / "portal_records_2026-09-01.health.json").unlink()
    capsys.readouterr()
    assert main(["report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(data) in err


@pytest.mark.parametrize("hours", ["-1", "nan"])
def test_a_heal_after_hours_that_cannot_work_is_refused_in_one_line(hours, monkeypatch, luigi_cfg, capsys, no_network):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg("portal", "heal_after_hours", hours)
    assert main(["export", "2026-09-01"]) == 2
    assert capsys.readouterr().err == f"error: [portal] heal_after_hours = {float(hours)}: give 0 or more hours\n"


def test_only_the_config_files_interpolation_errors_are_said_as_configuration_mistakes():
    import configparser

    from tasks import config

    try:
        raise ValueError("a parameter") from configparser.InterpolationSyntaxError("record_checks", "portal", "bad %")
    except ValueError as err:
        said = config.unreadable(err)
    assert str(said).startswith("[portal] record_checks: bad % (a config file reads % as interpolation")
    assert config.unreadable(ValueError("int('many')")) is None
