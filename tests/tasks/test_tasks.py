"""RegionExport and DayExport through Luigi, with a fake solver and a mocked portal."""

import datetime
import json
import re

import luigi
import pytest
import responses

from portal_export.captchaai import Solve
from portal_export.errors import UnsolvableError
from portal_export.store import LocalStore
from tasks import DayExport, RegionExport
from tests.helpers.cfg import TEST_KEY
from tests.helpers.runs import read_region

DAY = datetime.date(2026, 9, 1)
PORTAL = "http://portal.test"


class FakeSolver:
    """Solves every sitekey at once, except those scripted as unsolvable."""

    def __init__(self, unsolvable=()):
        self.unsolvable = set(unsolvable)
        self.solved = []
        self.reported_bad = []

    def solve(self, params, on_submit=None, on_poll=None):
        task_id = str(1000 + len(self.solved))
        self.solved.append((params["googlekey"], params["pageurl"]))
        if on_submit:
            on_submit(task_id)
        if params["googlekey"] in self.unsolvable:
            raise UnsolvableError("ERROR_CAPTCHA_UNSOLVABLE")
        return Solve(f"token-{params['googlekey']}", task_id, 1.5)

    def report_bad(self, task_id):
        self.reported_bad.append(task_id)


SOLVER = FakeSolver()


class FakeRegionExport(RegionExport):
    def make_solver(self):
        return SOLVER


class FakeDayExport(DayExport):
    region_task = FakeRegionExport


def records(day, region):
    return [{"z_id": f"{day}-{region}-{i}", "amount": i * 1.25, "ok": i % 2 == 0, "note": None} for i in range(3)]


def portal_mock(rs):
    def page(request):
        region = request.params["region"]
        return (
            200,
            {"Set-Cookie": "sid=1"},
            f'<form method="post" action="/export"><div class="g-recaptcha" data-sitekey="sk-{region}"></div></form>',
        )

    def post(request):
        form = dict(p.split("=", 1) for p in request.body.split("&"))
        assert form["g-recaptcha-response"] == f"token-sk-{form['region']}"
        return 200, {}, json.dumps({"records": records(form["day"], form["region"])})

    rs.add_callback(responses.GET, re.compile(rf"{PORTAL}/export\?.*"), callback=page)
    rs.add_callback(responses.POST, f"{PORTAL}/export", callback=post)


@pytest.fixture
def env(monkeypatch, luigi_cfg):
    global SOLVER
    SOLVER = FakeSolver()
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("PORTAL_BASE_URL", PORTAL)
    luigi_cfg("portal", "retry_base_s", 0)
    luigi_cfg("portal", "retry_jitter_s", 0)


def build(task):
    # workers=1: responses mocks do not reach a forked task process's parent
    return luigi.build([task], local_scheduler=True, workers=1, detailed_summary=True)


def read_day(data_dir, day=DAY):
    lines = (data_dir / f"portal_records_{day}.jsonl").read_text().splitlines()
    health = json.loads((data_dir / f"portal_records_{day}.health.json").read_text())
    return [json.loads(line) for line in lines], health


def test_a_day_materializes_with_four_solves(env, data_dir):
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        result = build(FakeDayExport(date=DAY))
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert sorted(k for k, _ in SOLVER.solved) == ["sk-east", "sk-north", "sk-south", "sk-west"]
    assert all(url.startswith(f"{PORTAL}/export?") for _, url in SOLVER.solved)
    rows, health = read_day(data_dir)
    expected = [r for region in ("north", "south", "east", "west") for r in records(str(DAY), region)]
    assert rows == expected
    assert [list(r) for r in rows] == [list(r) for r in expected]  # key order kept
    assert health["solves"] == 4 and health["unsolvable"] == 0 and health["rows"] == 12
    assert health["unsolvable_ratio"] == 0.0 and health["p95_solve_seconds"] == 1.5
    assert health["regions"]["north"] == {
        **health["regions"]["north"],
        "status": "ok",
        "rows": 3,
        "task_ids": [health["regions"]["north"]["task_ids"][0]],
        "solve_seconds": 1.5,
    }
    assert all(isinstance(t, str) for r in health["regions"].values() for t in r["task_ids"])


def test_one_unsolvable_region_passes_and_is_counted(env, data_dir):
    SOLVER.unsolvable = {"sk-east"}
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        result = build(FakeDayExport(date=DAY))
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    rows, health = read_day(data_dir)
    assert health["unsolvable"] == 1 and health["solves"] == 3 and health["unsolvable_ratio"] == 0.25
    east = health["regions"]["east"]
    assert east["status"] == "unsolvable" and east["solve_seconds"] is None and east["rows"] == 0
    assert len(east["task_ids"]) == 2  # one fresh resubmission, then counted
    facts, records = read_region(data_dir / "regions" / str(DAY) / "east.jsonl")  # the target, for the record
    assert (facts["status"], facts["task_ids"], records) == ("unsolvable", east["task_ids"], [])
    assert not any(r["z_id"].endswith(tuple(f"east-{i}" for i in range(3))) for r in rows)


def test_two_unsolvable_regions_fail_the_day_and_write_no_day_file(env, data_dir):
    SOLVER.unsolvable = {"sk-east", "sk-west"}
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        result = build(FakeDayExport(date=DAY))
    assert result.status == luigi.execution_summary.LuigiStatusCode.FAILED
    assert not (data_dir / f"portal_records_{DAY}.jsonl").exists()
    assert not (data_dir / f"portal_records_{DAY}.health.json").exists()
    failed = json.loads((data_dir / "regions" / str(DAY) / "failed.health.json").read_text())
    assert failed["unsolvable_regions"] == ["east", "west"]


def test_a_rerun_of_a_complete_day_makes_no_request(env, data_dir):
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        build(FakeDayExport(date=DAY))
    solved = len(SOLVER.solved)
    (data_dir / f"portal_records_{DAY}.jsonl").unlink()  # even the day rebuilt: its regions are done
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        result = build(FakeDayExport(date=DAY))
        assert len(rs.calls) == 0
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert len(SOLVER.solved) == solved
    assert read_day(data_dir)[1]["solves"] == 4


def test_a_permanent_error_fails_the_region_once_and_names_the_code(env, data_dir):
    with responses.RequestsMock() as rs:
        rs.add(responses.GET, re.compile(rf"{PORTAL}/export\?.*"), body="<html>maintenance</html>")
        result = build(FakeDayExport(date=DAY))
        gets = [c for c in rs.calls if c.request.method == "GET"]
    assert result.status == luigi.execution_summary.LuigiStatusCode.FAILED
    assert len(gets) == 4  # one page per region, no retry
    assert SOLVER.solved == []
    assert not (data_dir / "regions" / str(DAY)).exists() or not list((data_dir / "regions" / str(DAY)).glob("*.jsonl"))


@pytest.mark.parametrize("bad", ["a/b", "../x", "mid dle", ""])
def test_a_region_name_beyond_letters_digits_dash_underscore_is_refused_by_the_parameter(bad):
    with pytest.raises(ValueError, match="letters, digits"):
        RegionExport(date=DAY, region=bad)
    assert RegionExport(date=DAY, region="Zone-9_b").region == "Zone-9_b"


def test_every_output_is_written_through_its_target(env, data_dir, monkeypatch):
    """The store's own write path is left to state and failure records: with it refusing every
    other key, the tasks still make every file, the health of a failed day's too."""
    write = LocalStore.write

    def state_only(store, key, data):
        assert key.startswith("_state/") or "/failures/" in key, f"{key} written past its target"
        write(store, key, data)

    monkeypatch.setattr(LocalStore, "write", state_only)
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        assert build(FakeDayExport(date=DAY)).status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    rows, health = read_day(data_dir)
    assert len(rows) == health["rows"] == 12
    assert sorted(p.name for p in (data_dir / "regions" / str(DAY)).iterdir()) == [
        f"{r}.jsonl" for r in ("east", "north", "south", "west")
    ]
    SOLVER.unsolvable = {"sk-east", "sk-west"}
    failed_day = DAY + datetime.timedelta(days=1)
    with responses.RequestsMock() as rs:
        portal_mock(rs)
        assert build(FakeDayExport(date=failed_day)).status == luigi.execution_summary.LuigiStatusCode.FAILED
    assert json.loads((data_dir / "regions" / str(failed_day) / "failed.health.json").read_text())["unsolvable"] == 2
    assert not [p for p in data_dir.rglob("*") if "-luigi-tmp-" in p.name]  # no temporary file left
