"""A day through Luigi in this process against the sandbox over real HTTP (an unsolvable region:
tests/live/test_errors.py, through the CLI)."""

import datetime
import json

import luigi

from sandbox import REGIONS, expected_records, sitekey_for
from tasks import DayExport

DAY = datetime.date(2026, 9, 1)


def build(*tasks, workers=4):
    return luigi.build(list(tasks), local_scheduler=True, workers=workers, detailed_summary=True)


def test_a_day_over_real_http_delivers_every_record_once(live, data_dir):
    result = build(DayExport(date=DAY))
    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS
    lines = (data_dir / f"portal_records_{DAY}.jsonl").read_text().splitlines()
    expected = [r for region in REGIONS for r in expected_records(DAY, region)]
    assert lines == [json.dumps(r, ensure_ascii=False) for r in expected]  # each once, order and types kept
    health = json.loads((data_dir / f"portal_records_{DAY}.health.json").read_text())
    served = {t["id"]: t for t in live.tasks()}
    for region in REGIONS:
        facts = health["regions"][region]
        assert facts["status"] == "ok" and facts["rows"] == len(expected_records(DAY, region))
        (task_id,) = facts["task_ids"]
        assert served[task_id]["googlekey"] == sitekey_for(region)
    stats = live.stats()
    assert stats["key_in_query"] == 0
    assert stats["tokens"]["accepted"] == 4 and not stats["tokens"]["refused"]
    assert stats["threads"]["peak"] <= 4
