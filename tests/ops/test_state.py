"""make state and make prune [DRY_RUN=1] through the CLI: on a local data dir, in a bucket, and
against a store that does not answer (the one-line error of every command)."""

import datetime
import os
import subprocess
import time
from unittest import mock

import pytest

import tests
from portal_export import alert_claim, breaker, store_keys
from portal_export.caplog import CapLog
from portal_export.failures import write_failure
from portal_export.store import LocalStore
from sandbox.ports import free_port
from tasks.s3store import S3Store
from tests.helpers.cfg import TEST_KEY, write_cfg
from tests.portal_export.test_retention import seed_history

ROOT = str(tests.ROOT)
DAY_S = 86400.0
DAY = datetime.date(2026, 1, 5)


def counts(out):
    """{kind: count} of `make state`'s lines."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] in ("objects", "rows"):
            found[parts[0]] = int(parts[1])
    return found


def aged(store, key, days):
    t = time.time() - days * DAY_S
    os.utime(store.path(key), (t, t))


def seed_local(store, now):
    log = CapLog(store)
    with mock.patch("portal_export.caplog.time.time") as clock:
        for i, age in enumerate((90, 60, 40, 2)):
            clock.return_value = now - age * DAY_S
            log.note(3 + i % 2, 4, "another consumer", f"gone-host-{i}")
    for i, age in enumerate((100, 50, 1)):
        alert_claim.claim(store, f"{i:024x}", started=0, host="h")
        aged(store, store_keys.generation(store_keys.alert_claims(f"{i:024x}"), 0), age)
    for secret in (TEST_KEY, "a rotated key"):
        breaker.KeyBreaker(store, secret).trip("ERROR_KEY_DOES_NOT_EXIST")
        aged(store, store_keys.breaker(breaker.fingerprint(secret)), 100)
    write_failure(store, store_keys.region_failure(DAY, "north"), "PORTAL_HTML_ANSWER")
    aged(store, store_keys.region_failure(DAY, "north"), 100)
    store.write(store_keys.region(DAY, "south"), b"{}")  # a region target: never removed
    aged(store, store_keys.region(DAY, "south"), 100)


def test_state_and_prune_on_a_local_data_dir(cli, tmp_path):
    data, var = tmp_path / "data", tmp_path / "var"
    store = LocalStore(data)
    seed_local(store, time.time())
    seed_history(var / "luigid" / "history.db", [100, 1])
    env = {"PORTAL_DATA_DIR": str(data), "PORTAL_VAR_DIR": str(var), "CAPTCHAAI_API_KEY": TEST_KEY}

    state = cli("state", **env)
    assert state.code == 0, state
    assert counts(state.out) == {
        "cap-log": 4,
        "alert-claims": 3,
        "breakers": 2,
        "leases": 0,
        "heartbeats": 0,
        "inflight-marks": 0,
        "waiting-marks": 0,
        "failure-records": 1,
        "redone-days": 0,
        "other-state": 0,
        "luigid-history": 2,
    }, state.out
    before = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())

    dry = subprocess.run(
        ["make", "-s", "prune", "DRY_RUN=1"], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()) == before
    assert dry.stdout.count("  would remove ") == 3 + 2 + 1 + 1  # cap-log, claims, the rotated breaker, the record
    assert "would remove 3 cap-log, 2 alert-claims, 1 breakers, 1 failure-records, 1 luigid-history" in dry.stdout

    pruned = cli("prune", **env)
    assert pruned.code == 0, pruned
    state = cli("state", **env)
    left = counts(state.out)
    assert (left["cap-log"], left["alert-claims"], left["breakers"], left["failure-records"]) == (1, 1, 1, 0)
    assert left["luigid-history"] == 1
    assert store.exists(store_keys.breaker(breaker.fingerprint(TEST_KEY)))  # the key in use: still refused
    assert store.exists(store_keys.region(DAY, "south"))

    # without the key, no breaker can be told from the one in use: none goes
    breaker.KeyBreaker(store, "another old key").trip("ERROR_KEY_DOES_NOT_EXIST")
    aged(store, store_keys.breaker(breaker.fingerprint("another old key")), 100)
    keyless = cli("prune", **{**env, "CAPTCHAAI_API_KEY": ""})
    assert keyless.code == 0 and "every breaker kept" in keyless.out, keyless
    assert store.exists(store_keys.breaker(breaker.fingerprint("another old key")))


@pytest.mark.unmeasured
def test_state_and_prune_in_a_bucket(cli, s3_data_dir, tmp_path):
    cfg = write_cfg(tmp_path / "keep.cfg", {"portal": {"keep_state_days": repr(2 / DAY_S)}})  # two seconds
    store = S3Store(s3_data_dir)
    log = CapLog(store)
    log.note(3, 4, "another consumer", "gone-host-1")
    log.note(4, 4, "threads free again", "gone-host-1")
    alert_claim.claim(store, "c" * 24, started=0, host="h")
    written = time.time()
    env = {"LUIGI_CONFIG_PATH": str(cfg), "CAPTCHAAI_API_KEY": TEST_KEY}
    state = cli("state", **env)
    assert state.code == 0, state
    assert (counts(state.out)["cap-log"], counts(state.out)["alert-claims"]) == (2, 1), state.out
    while time.time() < written + 3:  # older than keep_state_days, by the store's clock too
        time.sleep(0.1)
    dry = cli("prune", "--dry-run", **env)
    assert dry.code == 0 and "would remove 1 cap-log, 1 alert-claims" in dry.out, dry
    assert len(store.list(store_keys.STATE)) == 3
    pruned = cli("prune", **env)
    assert pruned.code == 0 and "removed 1 cap-log, 1 alert-claims" in pruned.out, pruned
    assert (
        store.list(store_keys.STATE) == [key for key in store.list(store_keys.CAP_LOG)]
        and len(store.list(store_keys.STATE)) == 1
    )


def test_a_store_that_does_not_answer_is_the_one_line_error_of_every_command(cli, s3_data_dir):
    env = {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{free_port()}", "CAPTCHAAI_API_KEY": TEST_KEY}
    lines = []
    for argv in (["state"], ["prune", "--dry-run"], ["prune"], ["clear-breaker"]):
        run = cli(*argv, **env)
        assert run.code == 2, run
        errors = [line for line in run.err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "STORE_UNREACHABLE" in errors[0], run.err
        assert "Traceback" not in run.err
        lines.append(errors[0])
    assert len(set(lines)) == 1  # make state and make prune say what clear-breaker says


@pytest.mark.unmeasured
def test_a_night_removes_its_share_of_old_state_itself(live, cli, data_dir):
    """`make export` prunes at its end: old changes of dead runs and old claims go, the newest
    change and the day's outputs stay, with no `make prune`."""
    store = LocalStore(data_dir)
    seed_local(store, time.time())
    run = cli("export", "2026-01-06")
    assert run.code == 0, run
    assert store.exists(store_keys.day_records(DAY + datetime.timedelta(days=1)))
    changes = store.list(store_keys.CAP_LOG)
    assert not [k for k in changes if any(f"gone-host-{i}-" in k for i in (0, 1, 2))]
    assert [k for k in changes if "gone-host-3-" in k]  # 2 days old: kept
    assert store.list(store_keys.ALERTS) == [
        store_keys.generation(store_keys.alert_claims(f"{2:024x}"), 0)
    ]  # the day-old one
    # breakers of keys this run does not use (it has the sandbox's): gone, 100 days after they tripped
    assert store.list(store_keys.BREAKERS) == []
    # never a region target; failure records only by make prune (a night lists no region folder)
    assert store.exists(store_keys.region(DAY, "south")) and store.exists(store_keys.region_failure(DAY, "north"))
