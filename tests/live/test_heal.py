"""Days that are right, and days that heal, through the real CLI against the sandbox: a day is
exported once it has ended (UTC), with no request before the refusal; a day that failed validation
has only its unsolvable regions solved again by the first run `[portal] heal_after_hours` after the
failure, and /metrics follows: no counter goes down, the failed day leaves `days_failed`."""

import datetime
import json
import os
from collections import Counter

import pytest

from ops.cli import main
from portal_export import store_keys as keys
from portal_export.metrics import Metrics, Settings
from portal_export.store import LocalStore
from sandbox import REGIONS, sitekey_for

TASK_FAILED = 30  # luigi.cfg [retcode] task_failed
TODAY = datetime.datetime.now(datetime.timezone.utc).date()


def ago(n):
    return TODAY - datetime.timedelta(days=n)


def submits(live, before=()):
    """in.php submits per region, of the sandbox's tasks not in `before` (ids)."""
    region_of = {sitekey_for(r): r for r in REGIONS}
    return Counter(region_of[t["googlekey"]] for t in live.tasks() if t["id"] not in before)


def scrape(data_dir):
    found = {}
    for m in Metrics(LocalStore(data_dir), Settings(configured_cap=4, max_unsolvable_ratio=0.25)).collect():
        for labels, value in m.samples:
            found[m.name + "".join(f"{{{v}}}" for v in labels.values())] = value
    return found


def fail_east_and_west(live, cli, data_dir, d):
    """Export `d` with east and west unsolvable (2 of 4: the day fails validation), then make them solvable."""
    live.configure(unsolvable_sitekeys=frozenset({sitekey_for("east"), sitekey_for("west")}))
    run = cli("export", str(d))
    assert run.code == TASK_FAILED and "TOO_MANY_UNSOLVABLE" in run.err, run
    assert (data_dir / "regions" / str(d) / "failed.health.json").exists()
    live.configure(unsolvable_sitekeys=frozenset())
    return {t["id"] for t in live.tasks()}


@pytest.mark.unmeasured
def test_make_export_of_today_is_refused_before_any_request(live, cli):
    run = cli("export", str(TODAY))
    assert run.code == 2, run
    assert (
        run.err
        == f"error: DAY={TODAY} has not ended yet in UTC (today is {TODAY}): a day is exported once it has ended, the newest is {ago(1)}\n"
    )
    assert sum(live.stats()["requests"].values()) == 0, live.stats()["requests"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["export", str(ago(-1))], "is in the future"),
        (["retry-unsolvable", str(TODAY)], f"DAY={TODAY} has not ended yet in UTC"),
        (["backfill", str(ago(2)), str(ago(-1))], "STOP is exclusive, so at most today"),
    ],
)
def test_a_day_that_has_not_ended_is_refused_before_any_request(live, capsys, argv, said):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert sum(live.stats()["requests"].values()) == 0, live.stats()["requests"]


def test_a_failed_day_heals_on_the_next_backfill_solving_only_its_unsolvable_regions(live, cli, data_dir, fast_cfg):
    fast_cfg({"portal": {"heal_after_hours": 0}})
    d = ago(3)
    first = fail_east_and_west(live, cli, data_dir, d)
    assert submits(live) == {"north": 1, "south": 1, "east": 2, "west": 2}
    before = scrape(data_dir)
    assert before["portal_export_days_failed"] == 1

    healed = cli("backfill", str(d), str(ago(2)))
    assert healed.code == 0, healed
    assert f"heal: {d} failed validation; solving east, west again" in healed.err
    assert submits(live, first) == {"east": 1, "west": 1}  # only the two, once each
    health = json.loads((data_dir / keys.day_health(d)).read_text())
    assert health["solves"] == 4 and health["unsolvable"] == 0
    lines = (data_dir / keys.day_records(d)).read_text().splitlines()
    assert lines == [json.dumps(r, ensure_ascii=False) for region in REGIONS for r in live.expected_records(d, region)]
    folder = data_dir / "regions" / str(d)
    assert not (folder / "failed.health.json").exists() and not list(folder.glob("failures/*"))
    assert sorted(p.name.partition(".unsolvable-")[0] for p in folder.glob("*.unsolvable-*")) == [
        "east.jsonl",
        "west.jsonl",
    ]

    after = scrape(data_dir)
    assert after["portal_export_days_failed"] == 0  # the alert of the healed day clears with it
    for outcome in ("solved", "unsolvable"):
        name = f"portal_export_solves_total{{{outcome}}}"
        assert after[name] >= before[name]
    assert (after["portal_export_solves_total{solved}"], after["portal_export_solves_total{unsolvable}"]) == (4, 2)
    assert after["portal_export_submits_total"] == 8  # the failed night's 6 and the healing's 2


@pytest.mark.unmeasured
def test_with_the_default_a_run_right_after_solves_nothing_and_one_a_day_later_heals(live, cli, data_dir):
    d = ago(4)
    first = fail_east_and_west(live, cli, data_dir, d)
    again = cli("backfill", str(d), str(ago(3)))
    assert again.code == TASK_FAILED, again
    assert submits(live, first) == {} and "heal:" not in again.err

    # the regions 21 hours back, by the store's clock (failed.health.json stays new: every run
    # validates the day again): the next run heals it
    for region in REGIONS:
        path = data_dir / keys.region(d, region)
        t = path.stat().st_mtime - 21 * 3600
        os.utime(path, (t, t))
    later = cli("backfill", str(d), str(ago(3)))
    assert later.code == 0, later
    assert submits(live, first) == {"east": 1, "west": 1}
