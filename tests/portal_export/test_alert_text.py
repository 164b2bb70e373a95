"""The run summary's text, the progress line and the failure record, without Luigi."""

import datetime

from portal_export.alert_text import MissingDay, RunFacts, progress_line, summarize
from portal_export.failures import read_failure, write_failure
from portal_export.store import LocalStore
from sandbox import REGIONS

D = [datetime.date(2026, 6, 1) + datetime.timedelta(days=i) for i in range(30)]


def facts(**kw):
    base = dict(
        command="backfill",
        days=D,
        missing=[],
        regions=REGIONS,
        rerun="make backfill START=2026-06-01 STOP=2026-07-01",
        exit_code=0,
    )
    return RunFacts(**{**base, **kw})


def test_a_clean_run_is_one_line_and_not_sent():
    s = summarize(facts())
    assert s.text == "backfill 2026-06-01..2026-06-30: all 30 days complete" and not s.to_send


def test_a_code_shared_by_many_regions_is_grouped_and_every_day_is_named():
    key = {r: "ERROR_KEY_DOES_NOT_EXIST" for r in REGIONS}
    missing = [MissingDay(d, key) for d in D[:27]]
    missing.append(MissingDay(D[27], {"north": "ERROR_PAGEURL", "east": "ERROR_PAGEURL", "west": "HTTP_503"}))
    missing.append(MissingDay(D[28], unsolvable_ratio=0.5, unsolvable_regions=("north", "south")))
    s = summarize(facts(missing=missing, exit_code=30, breaker_codes=["ERROR_KEY_DOES_NOT_EXIST"]))

    assert s.subject == "backfill 2026-06-01..2026-06-30: 29 of 30 days missing" and s.kind == "failure"
    assert "- every region ERROR_KEY_DOES_NOT_EXIST (27 days):" in s.body
    assert s.body.count("ERROR_KEY_DOES_NOT_EXIST") == 2  # once for the group, once for the breaker
    assert "- north, east ERROR_PAGEURL; west HTTP_503 (1 day):\n  2026-06-28" in s.body
    assert "- 2026-06-29: unsolvable ratio 0.50 (north, south)" in s.body
    assert all(str(d) in s.body for d in D[:29]) and str(D[29]) not in s.body
    steps = s.body.split("What to do next:\n")[1]
    assert steps.index("make clear-breaker") < steps.index("Then rerun: make backfill START=2026-06-01 STOP=2026-07-01")
    assert "make retry-unsolvable DAY=2026-06-29" in steps
    assert max(len(line) for line in s.body.splitlines() if line.startswith("  20")) <= 66  # phone-wide day lists


def test_a_portal_that_does_not_fit_its_shape_is_told_to_fix_the_keys_before_the_rerun():
    codes = {"north": "PORTAL_RECORDS_MISMATCH", "south": "PORTAL_FIELD_VALUE", "east": "HTTP_503"}
    s = summarize(facts(days=D[:1], command="export", missing=[MissingDay(D[0], codes)], rerun="make export DAY=x"))
    steps = s.body.split("What to do next:\n")[1]
    assert steps.startswith(
        "- The portal's form or answer does not fit [portal] (PORTAL_FIELD_VALUE, PORTAL_RECORDS_MISMATCH): "
        "fix export_fields, region_values or record_checks as the message says (`make probe` shows the form)\n"
        "- Then rerun: make export DAY=x"
    )
    assert "does not fit" not in summarize(facts(missing=[MissingDay(D[0], {"east": "HTTP_503"})])).body


def test_warnings_on_a_complete_run_make_it_a_warning():
    s = summarize(facts(days=D[:1], command="export", slow_days={D[0]: 71.25}, busy_plan=(5, 5)))
    assert s.subject == "export 2026-06-01: complete, 2 warnings" and s.kind == "warning"
    assert "p95 solve time above 60 s on 1 day: 2026-06-01 71.2 s" in s.body
    assert "all 5 plan threads were busy" in s.body and "What to do next" not in s.body


def test_progress_line_estimates_from_the_pace_so_far():
    assert progress_line(D[2], 12, 92, 12 * 23.25) == "day 2026-06-03 done: 12 of 92, about 31 min left"
    assert progress_line(D[0], 1, 3, 10) == "day 2026-06-01 done: 1 of 3, about 20 s left"
    assert progress_line(D[0], 1, 100, 300) == "day 2026-06-01 done: 1 of 100, about 8 h 15 min left"
    assert progress_line(D[0], 3, 3, 10) == "day 2026-06-01 done: 3 of 3"


def test_failure_record_is_written_whole_read_back_and_cleared(tmp_path):
    store, key = LocalStore(tmp_path), "regions/2026-06-01/failures/region-north.json"
    path = tmp_path / key
    assert read_failure(store, key) is None
    write_failure(store, key, "ERROR_PAGEURL", "detail")
    record = read_failure(store, key)
    assert record["code"] == "ERROR_PAGEURL" and record["detail"] == "detail" and record["t"] > 0
    assert [p.name for p in path.parent.iterdir()] == ["region-north.json"]  # no temporary left
    path.write_text("{not json")
    assert read_failure(store, key)["code"] == "UNREADABLE_FAILURE_RECORD"
    store.delete(key)
    store.delete(key)  # a record already gone is no error
    assert not path.exists()
