"""State bounded by keep_state_days (portal_export/retention.py) and a night whose cost does not grow
with the nights before it: a data dir seeded with a year of state, written by the pipeline's own
code, costs a night the requests a fresh one costs, and `make prune` clears it in bounded batches."""

import collections
import datetime
import math
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import responses

from ops import retention_run
from portal_export import alert_claim, breaker, retention, store_keys
from portal_export.caplog import CapLog
from portal_export.retention import Policy
from portal_export.store import Entry, LocalStore
from tasks import targets
from tests.helpers.cfg import TEST_KEY
from tests.helpers.tracing import untraced
from tests.tasks import test_tasks

DAY_S = 86400.0
PAGE = 1000  # keys an S3 ListObjectsV2 answers at most


class CountingStore(LocalStore):
    """A LocalStore (so the tasks' targets stay local files) whose requests are counted as an object
    store would answer them: one per read, write, create, exists, delete, and one per page of
    1,000 keys a listing returns."""

    def __init__(self, root):
        super().__init__(root)
        self.inner = LocalStore(root)  # the same files, uncounted: for seeding and looking
        self.counts = collections.Counter()

    def read(self, key):
        self.counts["read"] += 1
        return super().read(key)

    def write(self, key, data):
        self.counts["write"] += 1
        super().write(key, data)

    def create(self, key, data):
        self.counts["create"] += 1
        return super().create(key, data)

    def exists(self, key):
        self.counts["exists"] += 1
        return super().exists(key)

    def delete(self, key):
        self.counts["delete"] += 1
        super().delete(key)

    def _pages(self, found):
        self.counts["list"] += max(1, math.ceil(len(found) / PAGE))
        self.counts["listed"] += len(found)

    def list(self, prefix, start_after=""):
        found = self.inner.list(prefix, start_after)
        self._pages(found)
        return found

    def entries(self, prefix, start_after="", limit=None):
        found = self.inner.entries(prefix, start_after, limit)
        self._pages(found)
        return found


def entry(key, age_s, now=1e9):
    return Entry(key, 10, now - age_s)


# ---------------------------------------------------------------------------------- the store


def test_a_listing_starts_after_a_key_and_entries_carry_size_and_time(tmp_path):
    store = LocalStore(tmp_path)
    for name in ("a/1", "a/2", "a/3", "b/1"):
        store.write(name, name.encode())
    os.utime(tmp_path / "a/2", (1_000_000, 1_000_000))
    assert store.list("a/", start_after="a/1") == ["a/2", "a/3"]
    assert store.list("a/", start_after="a/") == ["a/1", "a/2", "a/3"]
    found = store.entries("a/", start_after="a/1", limit=1)
    assert found == [Entry("a/2", 3, 1_000_000.0)]


# ---------------------------------------------------------------------------------- the policy


def test_cap_log_keeps_the_newest_change_and_those_of_runs_with_a_heartbeat():
    now = 1e9
    old = now - 10 * DAY_S
    dead, live, dead2, dead3, young = (
        store_keys.cap_change(old, 3, 4, "dead-1", 0),
        store_keys.cap_change(old + 1, 4, 4, "live-2", 1),
        store_keys.cap_change(old + 2, 3, 4, "dead-1", 2),
        store_keys.cap_change(old + 3, 4, 4, "dead-1", 3),
        store_keys.cap_change(now - 1, 4, 4, "dead-1", 4),
    )
    policy = Policy(now, 5 * DAY_S, live_runs={"live-2"})
    found = [entry(k, 0) for k in (dead, live, dead2, dead3, young)]
    assert policy.removable(retention.CAP_LOG, found, complete=True) == [dead, dead2, dead3]
    # the last of a listing may be the cap in force: it waits for a listing that shows what follows
    assert policy.removable(retention.CAP_LOG, found[:4], complete=False) == [dead, dead2]


def test_alert_claims_go_by_their_age():
    policy = Policy(1e9, DAY_S)
    found = [
        entry(store_keys.generation(store_keys.alert_claims("aa"), 0), 2 * DAY_S),
        entry(store_keys.generation(store_keys.alert_claims("bb"), 0), 10),
    ]
    assert policy.removable(retention.ALERTS, found, complete=True) == [found[0].key]


def test_a_breaker_goes_only_when_no_credential_in_use_is_its_and_it_is_old():
    in_use = store_keys.breaker(breaker.fingerprint(TEST_KEY))
    rotated = store_keys.breaker(breaker.fingerprint("an old key"))
    found = [entry(in_use, 100 * DAY_S), entry(rotated, 100 * DAY_S), entry(store_keys.breaker("young"), 10)]
    assert Policy(1e9, DAY_S, breakers_in_use={in_use}).removable(retention.BREAKERS, found, True) == [rotated]
    # the key in use unknown (not set where make prune runs): every breaker stays
    assert Policy(1e9, DAY_S, breakers_in_use=None).removable(retention.BREAKERS, found, True) == []


def test_lease_generations_keep_the_newest_while_a_run_has_a_heartbeat():
    chain = store_keys.governor_lease("abc")
    found = [entry(store_keys.generation(chain, n), 10 * DAY_S) for n in (1, 2, 3)]
    assert Policy(1e9, DAY_S, live_runs={"r"}).removable(retention.LEASES, found, True) == [found[0].key, found[1].key]
    assert Policy(1e9, DAY_S).removable(retention.LEASES, found, True) == [e.key for e in found]
    # a listing cut short may not hold the chain's newest: its last listed stays
    assert Policy(1e9, DAY_S).removable(retention.LEASES, found, False) == [found[0].key, found[1].key]


def test_dead_runs_heartbeats_and_marks_go_only_past_an_hour_whatever_keep_state_days():
    policy = Policy(1e9, 1.0, live_runs={"h-1"})
    beats = [
        entry(store_keys.run("h-1"), 2 * 3600),
        entry(store_keys.run("h-2"), 2 * 3600),
        entry(store_keys.run("h-3"), 60),
    ]
    assert policy.removable(retention.RUNS, beats, True) == [store_keys.run("h-2")]
    marks = [
        entry(store_keys.mark("inflight", "h-1", 5, 0), 7200),
        entry(store_keys.mark("inflight", "h-2", 6, 1), 7200),
    ]
    assert policy.removable(retention.INFLIGHT, marks, True) == [store_keys.mark("inflight", "h-2", 6, 1)]


def test_failure_records_go_by_age_and_region_targets_never():
    day = datetime.date(2026, 1, 5)
    found = [
        entry(store_keys.region(day, "north"), 100 * DAY_S),
        entry(store_keys.region_failure(day, "south"), 100 * DAY_S),
        entry(store_keys.day_failure(day), 10),
        entry(store_keys.failed_health(day), 100 * DAY_S),
    ]
    assert Policy(1e9, DAY_S).removable(retention.FAILURES, found, True) == [store_keys.region_failure(day, "south")]


def test_an_alert_chain_keeps_its_two_newest_claims(tmp_path):
    store = LocalStore(tmp_path)
    chain = store_keys.alert_claims("f" * 24)
    for night in range(6):  # the same failure, alerted every night by a new run
        claimed = alert_claim.claim(store, "f" * 24, started=night * DAY_S, host="h")
        assert claimed.ours
        newest = store.path(store_keys.generation(chain, night))
        os.utime(newest, (night * DAY_S + 1, night * DAY_S + 1))  # made that night, on the store's clock
    assert store.list(chain) == [store_keys.generation(chain, 4), store_keys.generation(chain, 5)]


# -------------------------------------------------------------------------- a year of state


YEAR_CHANGES = 20_000
YEAR_CLAIMS = 400


def seed_year(store, now):
    """A year of state through the pipeline's own code: 20,000 cap changes of dead runs (CapLog.note)
    and 400 alert claims (alert_claim.claim), each at its time in the year, its object's time too.
    Untraced: those lines are measured by their own tests, and under the tracer this took 20 s."""
    with untraced():
        _seed_year(store, now)


def _seed_year(store, now):
    log = CapLog(store)
    step = 365 * DAY_S / YEAR_CHANGES
    start = now - 365 * DAY_S
    with mock.patch("portal_export.caplog.time.time") as clock:
        for i in range(YEAR_CHANGES):
            clock.return_value = start + i * step
            log.note(3 if i % 2 else 4, 4, "another consumer", f"old-host-{1000 + i // 20}")
    for i in range(YEAR_CLAIMS):
        at = start + i * (365 * DAY_S / YEAR_CLAIMS)
        alert_claim.claim(store, f"{i:024x}", started=at, host="old-host")
        path = store.path(store_keys.generation(store_keys.alert_claims(f"{i:024x}"), 0))
        os.utime(path, (at, at))


@pytest.fixture
def night_env(test_tasks_env, luigi_cfg, tmp_path, monkeypatch):
    """A counting store for the night's data dir: on tmpfs where there is one (the year's 21,000
    files take a quarter of the time they take on disk)."""
    luigi_cfg("portal", "keep_state_days", 30)
    shm = "/dev/shm"
    data_dir = Path(tempfile.mkdtemp(dir=shm if os.access(shm, os.W_OK) else tmp_path))
    monkeypatch.setenv("PORTAL_DATA_DIR", str(data_dir))
    store = CountingStore(data_dir)
    try:
        with mock.patch.object(targets, "store", lambda: store):
            yield store
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def test_tasks_env(monkeypatch, luigi_cfg):
    test_tasks.SOLVER = test_tasks.FakeSolver()
    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    monkeypatch.setenv("PORTAL_BASE_URL", test_tasks.PORTAL)
    luigi_cfg("portal", "retry_base_s", 0)
    luigi_cfg("portal", "retry_jitter_s", 0)


def night(store, day):
    """What a night does with the store's state: the cap's first change, its day through Luigi (the
    cap log read for its health), the cap log's last change (every run's plan check), an alert
    claim, the run's share of pruning."""
    store.counts.clear()
    CapLog(store).note(4, 4, "the plan's first reading", "this-run")  # the steward's, at every run's start
    with responses.RequestsMock() as rs:
        test_tasks.portal_mock(rs)
        assert test_tasks.build(test_tasks.FakeDayExport(date=day))
    CapLog(store).last()
    alert_claim.claim(store, f"night-{day}", started=0.0, host="h")
    retention_run.nightly()
    return collections.Counter(store.counts)


def test_a_year_of_state_costs_a_night_no_more_than_a_fresh_data_dir_and_make_prune_clears_it(night_env):
    """One seeding of a year for both halves: it is most of the test's time."""
    store = night_env
    fresh = night(store, datetime.date(2026, 1, 1))
    now = datetime.datetime.now().timestamp()
    seed_year(store.inner, now)
    seeded = night(store, datetime.date(2026, 1, 2))
    # no more requests of any kind, save the deletes of the night's bounded share of pruning
    for kind in ("read", "write", "create", "exists", "list"):
        assert seeded[kind] <= fresh[kind], kind
    assert seeded["delete"] - fresh["delete"] == retention.BUDGET
    # nothing read a whole year's listing (20,000 changes: 20 pages of an object store)
    assert seeded["listed"] < 4 * retention.BATCH

    # make prune: what is older than keep_state_days goes, a page of the store at a time
    store.counts.clear()
    rules = Policy(now, 30 * DAY_S, retention.live_runs(store), {store_keys.breaker(breaker.fingerprint(TEST_KEY))})
    listed = []
    real_entries = store.entries

    def entries(prefix, start_after="", limit=None):
        listed.append(limit)
        return real_entries(prefix, start_after, limit)

    with mock.patch.object(store, "entries", entries):
        done = retention.prune_all(store, rules, batch=PAGE)
    cutoff = now - 30 * DAY_S
    start = now - 365 * DAY_S
    old_changes = sum(start + i * 365 * DAY_S / YEAR_CHANGES < cutoff for i in range(YEAR_CHANGES))
    old_claims = sum(start + i * 365 * DAY_S / YEAR_CLAIMS < cutoff for i in range(YEAR_CLAIMS))
    nightly = seeded["delete"] - fresh["delete"]  # the seeded night's share took the oldest changes
    assert done["cap-log"] == old_changes - nightly
    assert done["alert-claims"] == old_claims
    assert listed and set(listed) == {PAGE}  # in batches: no listing asked for more than a page
    assert store.counts["list"] == 1 + len(listed)  # each answered in one page (and the heartbeats' listing)
    tallies = retention.survey(store.inner)
    assert tallies["cap-log"].count == YEAR_CHANGES - old_changes + 2  # and the two nights' own
    assert tallies["alert-claims"].count == YEAR_CLAIMS - old_claims + 2
    assert tallies["cap-log"].oldest >= cutoff


# ------------------------------------------------------------------------- luigid's history


def seed_history(path, ages_days):
    """luigid's history db in Luigi's own schema: one task run per age, its events that old."""
    import sqlalchemy
    from luigi.db_task_history import Base, TaskEvent, TaskParameter, TaskRecord

    path.parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    session = sqlalchemy.orm.Session(engine)
    for i, age in enumerate(ages_days):
        record = TaskRecord(task_id=f"DayExport_{i}", name="DayExport", host="h")
        record.parameters = {"date": TaskParameter(name="date", value=f"2026-01-{i + 1:02d}")}
        session.add(record)
        session.flush()
        for name in ("PENDING", "RUNNING", "DONE"):
            ts = datetime.datetime.now() - datetime.timedelta(days=age)
            session.add(TaskEvent(task_id=record.id, event_name=name, ts=ts))
    session.commit()
    session.close()
    engine.dispose()


def test_luigid_history_loses_what_is_older_than_keep_state_days_in_batches(tmp_path):
    from ops import history

    db = tmp_path / "luigid" / "history.db"
    seed_history(db, [100, 90, 45, 31, 1, 0])
    cutoff = history.cutoff_of(30 * DAY_S, datetime.datetime.now().timestamp())
    assert history.prune(db, cutoff, delete=False) == (12, 4)  # DRY_RUN: counted
    assert history.survey(db).rows == 6
    assert history.prune(db, cutoff, batch=5) == (12, 4)  # three batches of events, one of tasks
    found = history.survey(db)
    assert (found.rows, found.events) == (2, 6)
    with sqlite3.connect(db) as conn:  # and the removed runs' parameters with them
        assert conn.execute("SELECT value FROM task_parameters ORDER BY value").fetchall() == [
            ("2026-01-05",),
            ("2026-01-06",),
        ]
    assert found.oldest > datetime.datetime.now() - datetime.timedelta(days=2)
    assert history.prune(db, cutoff) == (0, 0)
    assert history.survey(tmp_path / "none.db") is None and history.prune(tmp_path / "none.db", cutoff) == (0, 0)


# ---------------------------------------------------------------------------- the cap log's window


def test_a_window_reads_the_cap_log_from_its_lookback_on_and_counts_as_the_whole_log_does(tmp_path):
    store = CountingStore(tmp_path)
    log = CapLog(store)
    now = 1_800_000_000.0
    with mock.patch("portal_export.caplog.time.time") as clock:
        for age_h, cap in ((300, 2), (200, 4), (7, 2), (3, 3), (1, 4)):
            clock.return_value = now - age_h * 3600
            log.note(cap, 4, "plan", "run-1")
    start = now - 2 * 3600
    window = log.changes(start)
    assert [c["cap"] for c in window] == [2, 3, 4]  # from 6 hours before the window on: 7, 3 and 1 h ago
    from portal_export.caplog import seconds_below

    assert seconds_below(window, start, now) == 3600.0  # cap 3 from 2 h to 1 h ago
    assert seconds_below(log.changes(), start, now) == 3600.0  # as the whole log says
    store.counts.clear()
    log.changes(start)
    assert (store.counts["list"], store.counts["listed"]) == (1, 3)


def test_the_owner_notes_its_cap_again_within_the_lookback(tmp_path):
    from portal_export import caplog

    log = CapLog(LocalStore(tmp_path))
    with mock.patch("portal_export.caplog.time.time") as clock:
        clock.return_value = 1000.0
        log.still(3, 4, "run-1")  # nothing noted yet by this owner: nothing to repeat
        assert log.changes() == []
        log.note(3, 4, "plan", "run-1")
        clock.return_value = 1000.0 + caplog.RENOTE_S - 1
        log.still(3, 4, "run-1")
        assert len(log.changes()) == 1
        clock.return_value = 1000.0 + caplog.RENOTE_S
        log.still(3, 4, "run-1")
        assert [c["t"] for c in log.changes()] == [1000.0, 1000.0 + caplog.RENOTE_S]
        assert caplog.RENOTE_S < caplog.LOOKBACK_S / 2


@pytest.mark.parametrize("days", ["0", "-1"])
def test_a_keep_state_days_that_cannot_work_is_one_line_before_the_run(monkeypatch, luigi_cfg, capsys, days):
    from ops.cli import main

    monkeypatch.setenv("CAPTCHAAI_API_KEY", TEST_KEY)
    luigi_cfg("portal", "keep_state_days", days)
    assert main(["export", "2026-01-01"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: [portal] keep_state_days = {float(days)}: give a positive number of days"
    )
