"""The solve-health report: the table's rows and gaps, the plot file, the command line."""

import datetime
import json
import logging
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from portal_export import report
from portal_export.health import log as health_log
from portal_export.report import COLUMNS, NoHealthFilesError, build_report, main
from tests import ROOT  # noqa: E402

START = datetime.date(2024, 1, 1)
N_DAYS = 20
GAP = 5  # no file at all
FAILED = 8  # only regions/<day>/failed.health.json
RECOVERED = 12  # failed once, then exported: both files
MALFORMED = 15  # a day file that is not JSON: skipped, so the day is missing
OLD_FORMAT = 3  # written before refused_tokens, submits and idle_slot_seconds existed
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def day(i):
    return START + datetime.timedelta(days=i)


def p95_of(i):
    """Creeps from 30 s on the first day to 90 s on the last."""
    return 30.0 + 60.0 * i / (N_DAYS - 1)


def health(i, **overrides):
    h = {
        "day": str(day(i)),
        "solves": 4,
        "unsolvable": 0,
        "unsolvable_regions": [],
        "unsolvable_ratio": 0.0,
        "p95_solve_seconds": p95_of(i),
        "rows": 1000 + i,
        "submits": 5,
        "refused_tokens": 1,
        "idle_slot_seconds": 2.5,
        "regions": {"north": {"status": "ok", "rows": 1000 + i, "task_ids": ["1"], "solve_seconds": 20.0}},
    }
    h.update(overrides)
    return h


def write_day(data_dir, i, h):
    path = Path(data_dir) / f"portal_records_{day(i)}.health.json"
    path.write_text(h if isinstance(h, str) else json.dumps(h, indent=2))
    return path


def write_failed(data_dir, i, h):
    path = Path(data_dir) / "regions" / str(day(i)) / "failed.health.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(h if isinstance(h, str) else json.dumps(h))
    return path


def make_dataset(data_dir):
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    failed = dict(solves=2, unsolvable=2, unsolvable_ratio=0.5, rows=500, refused_tokens=3)
    for i in range(N_DAYS):
        if i == GAP:
            continue
        if i == FAILED:
            write_failed(data_dir, i, health(i, **failed))
        elif i == RECOVERED:
            write_failed(data_dir, i, health(i, **failed))
            write_day(data_dir, i, health(i))
        elif i == MALFORMED:
            write_day(data_dir, i, '{"day": "2024-01-16", "solves": ')
        elif i == OLD_FORMAT:
            h = health(i)
            for key in ("refused_tokens", "submits", "idle_slot_seconds"):
                del h[key]
            write_day(data_dir, i, h)
        else:
            write_day(data_dir, i, health(i))
    # Neighbours that are no health files of a day: ignored.
    (data_dir / f"portal_records_{day(0)}.jsonl").write_text('{"id": 1}\n')
    (data_dir / "regions" / str(day(0))).mkdir(parents=True, exist_ok=True)
    (data_dir / "regions" / str(day(0)) / "north.jsonl").write_text("{}")
    return data_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The dataset's report, built once: (data_dir, csv_path, png_path, frame, warnings)."""
    data_dir = make_dataset(tmp_path_factory.mktemp("report") / "data")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    loggers = (report.log, health_log)  # the report's and its health records' reader's
    for logger in loggers:
        logger.addHandler(handler)
    try:
        csv_path, png_path, frame = build_report(data_dir, max_unsolvable_ratio=0.25)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    return data_dir, csv_path, png_path, frame, [r.getMessage() for r in records]


@pytest.fixture
def csv(built):
    return pd.read_csv(built[1])


# --- the table ---------------------------------------------------------------------------------


def test_writes_both_files_into_data_dir_report_by_default(built):
    data_dir, csv_path, png_path, frame, _ = built
    assert csv_path == data_dir / "report" / "solve_health.csv"
    assert png_path == data_dir / "report" / "solve_health.png"
    assert sorted(p.name for p in (data_dir / "report").iterdir()) == ["solve_health.csv", "solve_health.png"]


def test_one_row_per_calendar_day_gaps_included(csv):
    assert list(csv.columns) == list(COLUMNS)
    assert list(csv["day"]) == [str(day(i)) for i in range(N_DAYS)]


def test_statuses(csv):
    expected = ["ok"] * N_DAYS
    expected[GAP] = expected[MALFORMED] = "missing"
    expected[FAILED] = "failed"
    assert list(csv["status"]) == expected


def test_values_of_ok_days(csv):
    ok = csv[csv["status"] == "ok"].set_index("day")
    assert ok.loc[str(day(0)), "p95_solve_seconds"] == pytest.approx(30.0)
    assert ok.loc[str(day(N_DAYS - 1)), "p95_solve_seconds"] == pytest.approx(90.0)
    assert ok.loc[str(day(10)), "p95_solve_seconds"] == pytest.approx(p95_of(10))
    assert ok.loc[str(day(10)), "rows"] == 1010
    assert ok.loc[str(day(10)), "solves"] == 4
    assert ok.loc[str(day(10)), "submits"] == 5
    assert ok.loc[str(day(10)), "refused_tokens"] == 1
    assert ok.loc[str(day(10)), "idle_slot_seconds"] == pytest.approx(2.5)
    assert (ok["unsolvable_ratio"] == 0).all()


def test_failed_day_keeps_its_numbers(csv):
    row = csv.iloc[FAILED]
    assert row["unsolvable_ratio"] == pytest.approx(0.5)
    assert (row["solves"], row["unsolvable"], row["rows"], row["refused_tokens"]) == (2, 2, 500, 3)


def test_failed_then_exported_counts_as_exported(csv):
    row = csv.iloc[RECOVERED]
    assert row["status"] == "ok"
    assert row["unsolvable_ratio"] == 0
    assert row["rows"] == 1000 + RECOVERED


def test_gap_day_has_no_numbers(built, csv):
    numbers = [c for c in COLUMNS if c not in ("day", "status", report.ROLLING_COLUMN)]
    assert csv.loc[GAP, numbers].isna().all()
    lines = built[1].read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    gap = lines[1 + GAP].split(",")
    assert gap[:2] == [str(day(GAP)), "missing"]
    assert [gap[i] for i, c in enumerate(COLUMNS) if c in numbers] == [""] * len(numbers)


def test_counts_are_written_as_integers(built):
    line = built[1].read_text().splitlines()[1]
    assert line.startswith(f"{day(0)},ok,30,30,0,4,0,1,5,1000,2.5")


def test_older_file_without_some_keys(csv):
    row = csv.iloc[OLD_FORMAT]
    assert row["status"] == "ok"
    assert math.isnan(row["refused_tokens"]) and math.isnan(row["submits"])
    assert math.isnan(row["idle_slot_seconds"])
    assert row["p95_solve_seconds"] == pytest.approx(p95_of(OLD_FORMAT))


def test_malformed_file_is_skipped_with_a_warning_naming_it(built):
    warnings = built[4]
    assert len(warnings) == 1
    assert f"portal_records_{day(MALFORMED)}.health.json" in warnings[0]


def test_rolling_median_follows_the_creeping_p95(csv):
    median = csv[report.ROLLING_COLUMN]
    assert median.notna().all()  # gap days take the median of the days around them
    assert median.is_monotonic_increasing
    assert median.iloc[0] == pytest.approx(30.0)
    assert median.iloc[-1] > 80
    # the 7 days up to the last: days 13..19, the malformed day 15 left out
    window = [p95_of(i) for i in range(13, 20) if i != MALFORMED]
    assert median.iloc[-1] == pytest.approx(pd.Series(window).median())


def test_returned_frame_matches_the_csv(built, csv):
    frame = built[3]
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == N_DAYS
    assert list(frame["day"].dt.strftime("%Y-%m-%d")) == list(csv["day"])
    # the CSV holds 10 significant digits
    for column in ("p95_solve_seconds", report.ROLLING_COLUMN, "rows", "idle_slot_seconds"):
        pd.testing.assert_series_equal(
            frame[column].astype("float64"), csv[column].astype("float64"), rtol=1e-9, check_names=False
        )


# --- the plot ----------------------------------------------------------------------------------


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_is_a_real_image_of_reasonable_size(built):
    png_path = built[2]
    width, height = png_size(png_path)
    assert width >= 800 and height >= 600
    assert 20_000 < png_path.stat().st_size < 1_000_000


def test_docs_example_image_is_small_and_valid():
    example = ROOT / "docs" / "solve_health_example.png"
    png_size(example)
    assert example.stat().st_size < 150_000


# --- edge cases --------------------------------------------------------------------------------


def test_rebuild_replaces_the_files_and_leaves_no_temporaries(tmp_path):
    data_dir = make_dataset(tmp_path / "d")
    out = tmp_path / "out"
    build_report(data_dir, out)
    write_day(data_dir, GAP, health(GAP))
    csv_path, _, frame = build_report(data_dir, out)
    assert frame.loc[GAP, "status"] == "ok"
    assert pd.read_csv(csv_path).loc[GAP, "status"] == "ok"
    assert sorted(p.name for p in out.iterdir()) == ["solve_health.csv", "solve_health.png"]


def test_exported_day_wins_even_when_its_file_is_read_first_or_last(tmp_path):
    write_failed(tmp_path, 0, health(0, unsolvable_ratio=0.75))
    write_day(tmp_path, 0, health(0))
    assert list(report.load_health(tmp_path)["status"]) == ["ok"]


def test_malformed_day_file_falls_back_to_its_failed_health(tmp_path, caplog):
    write_day(tmp_path, 0, "[1, 2")
    write_failed(tmp_path, 0, health(0, unsolvable_ratio=0.75))
    write_day(tmp_path, 1, '["a list, not an object"]')
    write_day(tmp_path, 2, health(2))
    with caplog.at_level(logging.WARNING, logger=report.__name__):
        frame = report.load_health(tmp_path)
    assert list(frame["status"]) == ["failed", "missing", "ok"]
    assert frame.loc[0, "unsolvable_ratio"] == 0.75
    assert any(f"portal_records_{day(0)}.health.json" in r.getMessage() for r in caplog.records)
    assert any(f"portal_records_{day(1)}.health.json" in r.getMessage() for r in caplog.records)


def test_values_of_the_wrong_type_become_missing(tmp_path):
    write_day(tmp_path, 0, health(0, p95_solve_seconds="slow", rows=None, solves=True))
    frame = report.load_health(tmp_path)
    assert frame[["p95_solve_seconds", "rows", "solves"]].isna().all(axis=None)


def test_a_single_day_without_p95_still_plots(tmp_path):
    write_day(tmp_path, 0, {"solves": 0, "unsolvable": 4, "unsolvable_ratio": 1.0, "p95_solve_seconds": None})
    csv_path, png_path, frame = build_report(tmp_path, max_unsolvable_ratio=0.25)
    assert len(frame) == 1 and math.isnan(frame.loc[0, "p95_solve_seconds"])
    png_size(png_path)


def test_names_that_hold_no_date_are_ignored(tmp_path):
    write_day(tmp_path, 0, health(0))
    (tmp_path / "portal_records_2024-02-30.health.json").write_text(json.dumps(health(1)))
    (tmp_path / "regions" / "latest").mkdir(parents=True)
    (tmp_path / "regions" / "latest" / "failed.health.json").write_text(json.dumps(health(1)))
    assert list(report.load_health(tmp_path)["day"]) == [pd.Timestamp(day(0))]


@pytest.mark.parametrize("setup", ["empty", "absent", "only-malformed"])
def test_no_health_files_is_a_clear_error(tmp_path, setup):
    data_dir = tmp_path / "data"
    if setup != "absent":
        data_dir.mkdir()
    if setup == "only-malformed":
        write_day(data_dir, 0, "not json")
    with pytest.raises(FileNotFoundError) as e:
        build_report(data_dir)
    assert isinstance(e.value, NoHealthFilesError)
    assert str(data_dir) in str(e.value) and "\n" not in str(e.value)
    assert not (data_dir / "report").exists()


# --- the command line --------------------------------------------------------------------------


def test_main_prints_the_last_14_days_and_the_paths(tmp_path, capsys):
    data_dir = make_dataset(tmp_path / "d")
    out = tmp_path / "out"
    assert main(["--data-dir", str(data_dir), "--out-dir", str(out), "--max-unsolvable-ratio", "0.25"]) == 0
    lines = capsys.readouterr().out.splitlines()
    days = [line.split()[0] for line in lines if line[:4] == "2024"]
    assert days == [str(day(i)) for i in range(N_DAYS - 14, N_DAYS)]
    assert any(line.startswith(f"{day(FAILED)}  failed") for line in lines)
    assert any(line.startswith(f"{day(MALFORMED)}  missing") for line in lines)
    assert f"table: {out / 'solve_health.csv'}" in lines
    assert f"plot:  {out / 'solve_health.png'}" in lines
    assert (out / "solve_health.png").exists()


def test_main_data_dir_defaults_to_portal_data_dir(tmp_path, monkeypatch, capsys):
    data_dir = make_dataset(tmp_path / "from-env")
    monkeypatch.setenv("PORTAL_DATA_DIR", str(data_dir))
    assert main([]) == 0
    assert str(data_dir / "report" / "solve_health.csv") in capsys.readouterr().out


def test_main_without_health_files_exits_2_with_one_line(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "nothing")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(tmp_path / "nothing") in err[0]


def test_main_exits_1_when_the_report_cannot_be_written(tmp_path, capsys):
    write_day(tmp_path, 0, health(0))
    (tmp_path / "occupied").write_text("a file where the report dir should be")
    assert main(["--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "occupied")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_table_marks_unknown_numbers_and_tolerates_fractional_counts(tmp_path):
    write_day(tmp_path, 0, health(0, solves=2.5))
    write_day(tmp_path, 2, health(2))
    table = report.format_table(report.load_health(tmp_path)).splitlines()
    assert table[0].split()[:3] == ["day", "status", "p95_s"]
    assert table[1].split()[:6] == [str(day(0)), "ok", "30.0", "30.0", "0%", "2"]
    # a missing day has no numbers of its own; the rolling median spans it
    assert table[2].split() == [str(day(1)), "missing", "-", "30.0"] + ["-"] * 6


@pytest.mark.parametrize("value", ["abc", "1.5", "-0.1", "nan"])
def test_main_refuses_a_bad_ratio(tmp_path, value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--data-dir", str(tmp_path), "--max-unsolvable-ratio", value])
    assert e.value.code == 2
    assert "--max-unsolvable-ratio" in capsys.readouterr().err


def run_module(*args, env=None):
    environ = {k: v for k, v in os.environ.items() if k != "PORTAL_DATA_DIR"}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "portal_export.report", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.live  # python -m portal_export.report in a process of its own
def test_module_command_line(tmp_path):
    data_dir = make_dataset(tmp_path / "d")
    done = run_module(env={"PORTAL_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr
    assert f"table: {data_dir / 'report' / 'solve_health.csv'}" in done.stdout
    assert f"plot:  {data_dir / 'report' / 'solve_health.png'}" in done.stdout
    assert (
        f"warning: skipped malformed health file {data_dir / f'portal_records_{day(MALFORMED)}.health.json'}"
        in done.stderr
    )

    missing = run_module("--data-dir", str(tmp_path / "empty"))
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and missing.stderr.startswith("error: ")
    assert str(tmp_path / "empty") in missing.stderr


@pytest.mark.unmeasured
def test_core_module_imports_no_luigi_no_tasks_no_pyplot():
    code = (
        "import sys, portal_export.report; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('luigi', 'tasks') or m == 'matplotlib.pyplot']; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_main_refuses_an_object_store_and_names_make_report(capsys):
    assert main(["--data-dir", "s3://bucket-1/portal"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: s3://bucket-1/portal is an object store: run `make report`, which reaches it"
