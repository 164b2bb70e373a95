"""A portal of its own shape, through the real CLI: the sandbox's daily report (sandbox/daily_report.py:
/reports/daily, `report_date` written DD.MM.YYYY, a `<select name="market">` of codes, a hidden token
that must come back, one sitekey for the site), described by `[portal]` keys alone in a layered file.

The sandbox answers what it is asked, defaults included: a post without the right `report_date`
answers the portal's default day (yesterday), which only `record_checks` can tell from the day asked.
"""

import datetime
import json

import pytest

from sandbox import REGIONS
from sandbox.daily_report import default_day
from tests.helpers.cfg import DAILY_REPORT as SHAPED
from tests.helpers.cfg import MARKET, write_cfg

DAY = datetime.date(2026, 9, 1)


@pytest.fixture
def shaped(live):
    """The `live` sandbox serving the daily-report portal."""
    live.configure(shape="daily-report")
    return live


def requests_to(sb, *endpoints):
    seen = sb.stats()["requests"]
    return sum(seen.get(e, 0) for e in endpoints)


def day_file(data_dir):
    return data_dir / f"portal_records_{DAY}.jsonl"


@pytest.mark.unmeasured
def test_the_day_exact_from_a_portal_of_its_own_shape_with_only_portal_keys(shaped, fast_cfg, cli, data_dir):
    fast_cfg({"portal": SHAPED})

    run = cli("export", DAY)

    assert run.code == 0, run
    expected = [
        json.dumps(r, ensure_ascii=False) for region in REGIONS for r in shaped.report_records(DAY, MARKET[region])
    ]
    assert day_file(data_dir).read_text().splitlines() == expected
    stats = shaped.stats()
    assert stats["tokens"]["accepted"] == 4 and stats["tokens"]["refused"] == {}  # the hidden _token came back
    assert {t["pageurl"] for t in shaped.tasks()} == {f"{shaped.portal_url}/reports/daily"}


@pytest.mark.unmeasured
def test_our_default_shape_finds_no_page_there(shaped, cli, data_dir):
    """Why the keys exist: without them the export page is a 404, and nothing is solved."""
    run = cli("export", DAY)
    assert run.code != 0 and "PORTAL_HTTP_404" in run.err, run
    assert requests_to(shaped, "in.php") == 0 and shaped.tasks() == [] and not day_file(data_dir).exists()


def test_a_value_the_select_lacks_fails_before_any_captchaai_request(shaped, fast_cfg, cli, data_dir):
    fast_cfg({"portal": {**SHAPED, "regions": "west", "region_values": "west=WE-04"}})

    run = cli("export", DAY)

    assert run.code != 0, run
    assert "PORTAL_FIELD_VALUE" in run.err
    assert "field 'market' is a <select> without the value 'WE-04'; it offers 'NE-01' (North-East)" in run.err
    assert requests_to(shaped, "portal_get") >= 1  # the page was loaded: the form was looked at
    # no submit, no poll (the run's plan check at start reads threadsinfo, which solves nothing)
    assert requests_to(shaped, "in.php") == 0 and shaped.stats()["polls"] == {} and shaped.tasks() == []
    assert not day_file(data_dir).exists()


def test_a_mistyped_field_name_answers_the_default_day_which_the_checks_refuse(shaped, fast_cfg, cli, data_dir):
    fields = "report_dat={day:DD.MM.YYYY}, market={region}"  # the page's own report_date goes out unchanged
    fast_cfg(
        {
            "portal": {
                **SHAPED,
                "regions": "north,south",
                "region_values": "north=NE-01,south=SE-02",
                "export_fields": fields,
            }
        }
    )

    run = cli("export", DAY)

    assert run.code != 0, run
    assert "PORTAL_RECORDS_MISMATCH" in run.err
    assert f"has date='{default_day():%d.%m.%Y}', [portal] record_checks wants date='01.09.2026'" in run.err
    assert "fix export_fields, region_values or record_checks" in run.err  # the run's summary
    assert shaped.stats()["tokens"]["accepted"] == 2  # the portal answered: only the checks can tell
    assert not day_file(data_dir).exists()
    assert list((data_dir / "regions" / str(DAY)).glob("*.jsonl")) == []  # nothing of either answer kept


@pytest.mark.parametrize(
    "keys, said",
    [
        ({"export_page": "/reports/daily?d={dya}"}, "[portal] export_page: unknown placeholder {dya}"),
        ({"record_checks": "date={day:%%d.%%m.%%Y}"}, "[portal] record_checks date: {day:%d.%m.%Y} holds %"),
        ({"region_values": "north=NE-01, nord=NE-01"}, "[portal] region_values: 'nord' is not one of [portal] regions"),
        ({"export_fields": "report_date={day:DD.MM.YYY}"}, "holds 'YYY': the date's parts are YYYY, MM and DD"),
    ],
)
@pytest.mark.parametrize("command", [("export", DAY), ("probe", DAY)], ids=["export", "probe"])
def test_a_shape_that_cannot_work_is_refused_in_one_line_before_any_request(shaped, fast_cfg, cli, keys, said, command):
    fast_cfg({"portal": {**SHAPED, **keys}})

    run = cli(*command)

    assert run.code == 2, run
    assert run.err == f"error: {run.err.removeprefix('error: ').strip()}\n" and said in run.err
    assert shaped.stats()["requests"] == {}


@pytest.mark.parametrize("command", [("export", DAY), ("probe", DAY)], ids=["export", "probe"])
def test_a_strftime_pattern_the_config_file_cannot_read_is_refused_in_one_line(shaped, cli, tmp_path, command):
    """A single % is luigi.cfg's interpolation: Luigi itself refuses the section, which must not be a traceback."""
    site = write_cfg(tmp_path / "site.cfg", {"portal": {**SHAPED, "record_checks": "date={day:%d.%m.%Y}"}})

    run = cli(*command, LUIGI_CONFIG_PATH=str(site))

    assert run.code == 2, run
    assert run.err.startswith("error: [portal] record_checks: '%' must be followed by '%' or '('")
    assert run.err.count("\n") == 1 and "{day:DD.MM.YYYY}, not strftime's %d" in run.err
    assert shaped.stats()["requests"] == {}
