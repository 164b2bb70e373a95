"""The data dir in an object store (README "Data in an object store"): the real CLI against the
sandbox and a real SeaweedFS, a bucket per test.

Export, backfill, a rerun from a second clone that solves nothing, the report; a kill mid-backfill
then a rerun; the store's endpoint down for 10 s mid-run; bad store input refused up front; the
revoked-key alert; and what RangeDaily's completeness check of 365 days costs in store requests.
"""

import contextlib
import json
import os
import shutil
import signal
import time

import psutil
import pytest

from ops.steward import REMOTE_LEND_EVERY_S
from portal_export import retention
from sandbox import REGIONS
from sandbox.ports import free_port
from sandbox.seaweedfs import SECRET_KEY
from tests import ROOT
from tests.helpers.cfg import FAST_CLIENT
from tests.helpers.speed import scaled
from tests.helpers.tcp_proxy import TcpProxy

UNKNOWN_KEY = "f" * 32  # well-formed, no such account: what a revoked key answers


def bucket_of(url):
    return url.split("/")[2]


# What a run keeps in the store while it goes (portal_export.runs, inflight, gate)
RUN_STATE = ("_state/runs/", "_state/inflight/", "_state/waiting/", "_state/cap.json", "_state/plan-poke.json")


def objects(seaweedfs, url):
    """{key below the prefix: bytes} of every object under the data dir's prefix."""
    bucket, prefix = bucket_of(url), url.split("/", 3)[3] + "/"
    client = seaweedfs.client()
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", ()):
            # a key deleted since the listing: a running run's mark of a solve that ended
            with contextlib.suppress(client.exceptions.NoSuchKey):
                out[obj["Key"][len(prefix) :]] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def days(start, n):
    import datetime

    d0 = datetime.date.fromisoformat(start)
    return [(d0 + datetime.timedelta(days=i)).isoformat() for i in range(n)]


def assert_days_exact(sb, objs, day_list):
    for day in day_list:
        lines = objs[f"portal_records_{day}.jsonl"].decode().splitlines()
        expected = [json.dumps(r, ensure_ascii=False) for region in REGIONS for r in sb.expected_records(day, region)]
        assert lines == expected, day
        health = json.loads(objs[f"portal_records_{day}.health.json"])
        assert health["solves"] == 4 and set(health["regions"]) == set(REGIONS)


def submits(sb):
    return sum(sb.stats()["submits"].values())


def sandbox_requests(sb):
    return sum(sb.stats()["requests"].values())


def second_clone(tmp_path):
    """A data-less checkout elsewhere: its own luigi.cfg and var/, no data/ and no state of the first."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "luigi.cfg", clone / "luigi.cfg")
    return clone, {"PORTAL_VAR_DIR": str(clone / "var")}


@pytest.mark.long
@pytest.mark.unmeasured
def test_backfill_and_export_land_in_the_bucket_and_a_second_clone_solves_nothing_then_reports(
    live, cli, s3_data_dir, seaweedfs, tmp_path, data_dir
):
    run = cli("backfill", "2026-05-01", "2026-05-04")
    assert run.code == 0, run.err[-3000:]
    run = cli("export", "2026-05-04")
    assert run.code == 0, run.err[-3000:]
    assert f"export: {s3_data_dir}/portal_records_2026-05-04.jsonl" in run.err
    objs = objects(seaweedfs, s3_data_dir)
    day_list = days("2026-05-01", 4)
    assert_days_exact(live, objs, day_list)
    # every object at its relative name, and nothing else: no temporary, no partial upload
    expected = {f"portal_records_{d}.{ext}" for d in day_list for ext in ("jsonl", "health.json")}
    expected |= {f"regions/{d}/{r}.jsonl" for d in day_list for r in REGIONS}
    state = {k for k in objs if k.startswith("_state/cap-log/")}
    assert set(objs) == expected | state, sorted(set(objs) - expected - state)
    assert not data_dir.exists()  # nothing went to the local default data dir
    solved = submits(live)
    assert solved == 16

    clone, env = second_clone(tmp_path)
    again = cli("backfill", "2026-05-01", "2026-05-05", cwd=clone, **env)
    assert again.code == 0, again.err[-3000:]
    assert submits(live) == solved  # the other clone's work is seen: nothing solved again
    assert not (clone / "data").exists()

    report = cli("report", cwd=clone, **env)
    assert report.code == 0, report.err[-3000:]
    assert f"table: {s3_data_dir}/report/solve_health.csv" in report.out
    assert f"plot:  {s3_data_dir}/report/solve_health.png" in report.out
    objs = objects(seaweedfs, s3_data_dir)
    table = objs["report/solve_health.csv"].decode().splitlines()
    assert table[0].startswith("day,status,") and [line.split(",")[:2] for line in table[1:]] == [
        [d, "ok"] for d in day_list
    ]
    assert objs["report/solve_health.png"].startswith(b"\x89PNG")


@pytest.mark.unmeasured
def test_a_kill_mid_backfill_leaves_only_whole_objects_and_the_rerun_solves_only_what_is_missing(
    live, cli, s3_data_dir, seaweedfs
):
    live.configure(solve_s=20)  # 0.2 s a solve: the kill lands among solves
    day_list = days("2026-05-10", 4)
    proc = cli.start("--workers", "4", "backfill", day_list[0], "2026-05-14")
    deadline = time.monotonic() + scaled(30)
    while not any(k.startswith("regions/") for k in objects(seaweedfs, s3_data_dir)):
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)
        time.sleep(0.02)
    children = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait()
    # every process of the run dies with it: its task processes, and Luigi's completion cache (a
    # multiprocessing.Manager server, which would otherwise wait for its dead parent forever)
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == [], [(p.pid, p.cmdline()) for p in alive]
    time.sleep(0.3)
    objs = objects(seaweedfs, s3_data_dir)
    done = {k for k in objs if k.startswith("regions/") and k.count("/") == 2}
    assert 1 <= len(done) < 16, sorted(objs)
    for key in done:  # whole: every region object parses, its facts and then its records
        facts, *records = objs[key].decode().splitlines()
        assert json.loads(facts)["status"] == "ok" and len(records) == json.loads(facts)["rows"]
        assert all(isinstance(json.loads(r), dict) for r in records)
    others = {k for k in objs if k not in done and not k.startswith(("portal_records_", "_state/cap-log/"))}
    # the killed run's state of the cap (its heartbeat, its tasks' marks, its cap in force): dead with it
    others -= {k for k in objs if k.startswith(RUN_STATE)}
    assert others <= {k for k in objs if "/failures/" in k}, others  # no temporary object of any kind
    before = submits(live)
    # A mark whose process was killed mid-submit names no task: it counts, whatever runs, until the
    # solve's deadline and an HTTP timeout are past (a second more for the store's whole-second
    # times); the rerun could be over before that, and leave it to the next run.
    if any(k.startswith("_state/inflight/") and not objs[k] for k in objs):
        bound = FAST_CLIENT["captchaai"]["timeout_s"] + FAST_CLIENT["captchaai"]["http_timeout_s"] + 1
        time.sleep(max(0.0, killed_at + bound - time.monotonic()))

    run = cli("--workers", "4", "backfill", day_list[0], "2026-05-14")
    assert run.code == 0, run.err[-3000:]
    after = objects(seaweedfs, s3_data_dir)
    assert_days_exact(live, after, day_list)
    assert not [k for k in after if k.startswith(RUN_STATE) and k != "_state/plan-poke.json"]  # cleaned up
    assert submits(live) - before == 16 - len(done)  # what was exported before the kill is not solved again


@pytest.mark.long
@pytest.mark.unmeasured
def test_the_store_down_for_10_s_mid_run_loses_no_region_and_the_run_completes(
    live, cli, s3_data_dir, seaweedfs, fast_cfg
):
    proxy = TcpProxy(seaweedfs.ports["s3"])
    # A token lives 120 s and a solve's deadline is 120 s, both longer than the outage, as at real
    # speed (scaled, 1.2 s and 3 s would expire the solves whose polls wait on the store's breaker
    # check meanwhile: solved again, never delivered twice, but not what this test is about)
    live.configure(solve_s=20, token_validity_s=2000)
    fast_cfg({"captchaai": {"timeout_s": 30}})
    day_list = days("2026-05-20", 4)
    proc = cli.start("--workers", "4", "backfill", day_list[0], "2026-05-24", AWS_ENDPOINT_URL_S3=proxy.url)
    deadline = time.monotonic() + scaled(30)
    while not any(k.startswith("regions/") for k in objects(seaweedfs, s3_data_dir)):
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)
        time.sleep(0.02)
    proxy.down()
    down_at = time.monotonic()
    time.sleep(10)
    proxy.up()
    proc.wait(timeout=scaled(120))
    out, err = cli.output(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "endpoint unreachable" in err and "waiting up to 120 s for it to answer" in err
    assert time.monotonic() - down_at >= 10
    assert_days_exact(live, objects(seaweedfs, s3_data_dir), day_list)
    tasks = live.tasks()
    assert len(tasks) == 16 and all(t["token_accepted"] for t in tasks)  # no delivered region was solved twice


@pytest.mark.parametrize(
    "case, env, code, cause",
    [
        (
            "refused",
            {"AWS_SECRET_ACCESS_KEY": "wrong-" + SECRET_KEY[::-1]},
            "STORE_CREDENTIALS_REFUSED",
            "credentials refused (SignatureDoesNotMatch)",
        ),
        (
            "no-bucket",
            {"PORTAL_DATA_DIR": "s3://no-such-bucket-0815/portal"},
            "STORE_NO_BUCKET",
            "bucket 'no-such-bucket-0815' does not exist",
        ),
        (
            "unreachable",
            {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:{port}"},
            "STORE_UNREACHABLE",
            "endpoint unreachable",
        ),
        ("malformed", {"PORTAL_DATA_DIR": "s3://Not_A_Bucket/portal"}, "STORE_BAD_URL", "is no bucket name"),
        ("no-bucket-name", {"PORTAL_DATA_DIR": "s3:///portal"}, "STORE_BAD_URL", "is no bucket name"),
    ],
)
def test_bad_store_input_is_one_line_exit_2_and_no_request_to_captchaai_or_the_portal(
    live, cli, s3_data_dir, case, env, code, cause
):
    env = {k: v.format(port=free_port()) for k, v in env.items()}
    commands = [["export", "2026-05-30"]] + ([["backfill", "2026-05-28", "2026-05-30"]] if case == "refused" else [])
    for command in commands:
        run = cli(*command, **env)
        assert run.code == 2, run
        errors = [line for line in run.err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith(f"error: {code}: store s3://") and cause in errors[0], run.err
        assert SECRET_KEY not in run.err + run.out and env.get("AWS_SECRET_ACCESS_KEY", SECRET_KEY) not in run.err
    assert sandbox_requests(live) == 0  # neither CaptchaAI nor the portal heard anything


def test_a_tmpdir_too_long_for_the_completion_cache_socket_is_one_line_exit_2(live, cli, s3_data_dir, tmp_path):
    """An s3:// run uses Luigi's completion cache, a multiprocessing.Manager with a socket under
    TMPDIR: a long TMPDIR (a deep CI workspace) is refused up front, not an exit 40 traceback."""
    deep = tmp_path / ("t" * 80)
    deep.mkdir()
    run = cli("export", "2026-05-30", TMPDIR=str(deep))
    assert run.code == 2, run
    errors = [line for line in run.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"TMPDIR {deep} is too long" in errors[0], run.err
    assert "Traceback" not in run.err and sandbox_requests(live) == 0
    assert cli("export", "2026-05-30", TMPDIR=str(tmp_path)).code == 0  # a short one runs


@pytest.mark.unmeasured
def test_a_revoked_key_alerts_once_with_the_breaker_in_the_bucket_which_stops_a_second_clone(
    live,
    cli,
    s3_data_dir,
    seaweedfs,
    webhook,
    monkeypatch,
    tmp_path,
):
    hook = webhook()
    monkeypatch.setenv("ALERT_WEBHOOK_URL", hook.url)
    run = cli("backfill", "2026-06-01", "2026-06-04", CAPTCHAAI_API_KEY=UNKNOWN_KEY)
    assert run.code != 0
    (text,) = hook.texts()
    assert text.startswith("backfill 2026-06-01..2026-06-03: 3 of 3 days missing")
    assert "every region ERROR_KEY_DOES_NOT_EXIST" in text and "make clear-breaker" in text
    assert f"data dir {s3_data_dir}" in text
    objs = objects(seaweedfs, s3_data_dir)
    assert [k for k in objs if k.startswith("_state/breaker-")]
    bad = live.stats()["bad_key_requests"]

    clone, env = second_clone(tmp_path)
    again = cli("backfill", "2026-06-01", "2026-06-04", cwd=clone, CAPTCHAAI_API_KEY=UNKNOWN_KEY, **env)
    assert again.code != 0 and "A breaker is open (ERROR_KEY_DOES_NOT_EXIST)" in again.err
    assert live.stats()["bad_key_requests"] == bad and submits(live) == 0  # stopped before any submit
    for where in (run.err, run.out, again.err, again.out, *hook.texts(), *(v.decode("latin-1") for v in objs.values())):
        assert SECRET_KEY not in where and UNKNOWN_KEY not in where


@pytest.mark.unmeasured
def test_the_completeness_check_of_365_days_is_a_handful_of_store_requests(live, cli, s3_data_dir, seaweedfs):
    """Every day of a year already complete: the backfill must find that out by listing, not by
    asking for each day's objects (730 requests, or four times that with Luigi's own `exists`)."""
    bucket, prefix = bucket_of(s3_data_dir), s3_data_dir.split("/", 3)[3]
    client = seaweedfs.client()
    day_list = days("2025-12-01", 365)
    for day in day_list:
        client.put_object(Bucket=bucket, Key=f"{prefix}/portal_records_{day}.jsonl", Body=b"")
        client.put_object(Bucket=bucket, Key=f"{prefix}/portal_records_{day}.health.json", Body=b"{}")
    before = seaweedfs.requests(bucket)
    run = cli("backfill", day_list[0], "2026-12-01")
    assert run.code == 0, run.err[-3000:]
    used = seaweedfs.requests(bucket) - before
    print(f"store requests of a 365-day backfill with every day complete: {used}", seaweedfs.requests_by_type(bucket))
    # a listing or two per kind of object, and the run's stewarding of the cap: its heartbeat, the
    # first plan reading's two counts of solves in flight, the cap in force, the cap log, and
    # their removal at the end (a fixed cost of every run, whatever its days); and the count of
    # regions that wait, a LIST every REMOTE_LEND_EVERY_S while the run lasts (longer on a loaded machine);
    # and the run's share of pruning old state, its listings (nothing here is old enough to delete)
    # (the live runs' listing, one per kind, two for a hashed kind that wraps round)
    nightly = 1 + sum(2 if kind.hashed else 1 for kind in retention.NIGHTLY)
    bound = 12 + 9 + nightly + run.seconds / REMOTE_LEND_EVERY_S
    assert used <= bound, (used, run.seconds, seaweedfs.requests_by_type(bucket))
    assert submits(live) == 0
