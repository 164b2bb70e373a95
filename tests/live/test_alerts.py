"""Alerts (README "Alerts"): the real CLI against the sandbox, a real SMTP server and a real webhook
receiver on loopback. One message per channel for a run that leaves days missing, none for a clean
run, a warning for a slow or busy plan; a dead channel changes nothing but one warning line; no
secret in anything delivered, printed or written.
"""

import datetime
import re
import signal
import subprocess
import time

import pytest

from sandbox import SANDBOX_KEY, SANDBOX_USER
from sandbox.ports import free_port
from tests.helpers.cfg import polls
from tests.helpers.runs import CliRun, Luigid
from tests.helpers.speed import scaled

UNKNOWN_KEY = "f" * 32  # well-formed, no such account: what a revoked key answers
PASSWORD = "pw-Sup3rS3cret-portal"  # set, never used for a login here: it must be scrubbed all the same
TASK_FAILED = 30  # luigi.cfg [retcode] task_failed


def days(start, stop):
    d0, d1 = datetime.date.fromisoformat(start), datetime.date.fromisoformat(stop)
    return [d0 + datetime.timedelta(days=i) for i in range((d1 - d0).days)]


@pytest.fixture
def channels(live, fast_cfg, smtp_server, webhook, monkeypatch):
    """Both channels configured, as the README says: [email]/[smtp] in a layered file, the webhook
    in the environment; the portal password set too, so that its scrubbing is shown."""
    hook = webhook()
    monkeypatch.setenv("ALERT_WEBHOOK_URL", hook.url)
    monkeypatch.setenv("PORTAL_PASSWORD", PASSWORD)

    def layer(sections=None, smtp=smtp_server):
        merged = smtp.cfg() if smtp else {}
        for section, keys in (sections or {}).items():
            merged.setdefault(section, {}).update(keys)
        return fast_cfg(merged)

    layer()
    return smtp_server, hook, layer


def assert_no_secret(smtp, hook, run, data_dir, keys=(UNKNOWN_KEY, SANDBOX_KEY)):
    secrets = [*keys, PASSWORD, hook.url, hook.url.split(str(hook.port))[1]]
    # raw bytes, and the decoded text too: Luigi's e-mail body is base64
    delivered = [*smtp.raw, *hook.raw, *(f"{s}\n{b}".encode() for s, b in smtp.texts()), *map(str.encode, hook.texts())]
    for secret in secrets:
        for raw in delivered:
            assert secret.encode() not in raw, (secret, raw[:500])
        assert secret not in run.err and secret not in run.out, secret
        for path in data_dir.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), (secret, path)


def one_message_each(smtp, hook):
    """The one e-mail and the one POST: same subject line, same body, and what the run printed."""
    assert len(smtp.raw) == 1, [s for s, _ in smtp.texts()]
    assert len(hook.raw) == 1, hook.texts()
    (subject, body), (text,) = smtp.texts()[0], hook.texts()
    assert text == f"{subject}\n\n{body.rstrip()}"
    return subject, body


@pytest.mark.unmeasured
def test_a_revoked_key_over_30_days_sends_one_email_and_one_post_naming_every_day_and_the_code(channels, cli, data_dir):
    smtp, hook, _ = channels
    start, stop = "2026-07-01", "2026-07-31"
    run = cli("backfill", start, stop, CAPTCHAAI_API_KEY=UNKNOWN_KEY)

    assert run.code == TASK_FAILED, run
    subject, body = one_message_each(smtp, hook)
    assert subject == "backfill 2026-07-01..2026-07-30: 30 of 30 days missing"
    for d in days(start, stop):
        assert str(d) in body
    assert "- every region ERROR_KEY_DOES_NOT_EXIST (30 days):" in body
    assert body.count("ERROR_KEY_DOES_NOT_EXIST") == 2  # the group, and the breaker: not 120 times
    assert "A breaker is open (ERROR_KEY_DOES_NOT_EXIST)" in body and "make clear-breaker" in body
    assert f"Then rerun: make backfill START={start} STOP={stop}" in body
    assert hook.texts()[0] in run.err  # the terminal and the cron log say the same
    assert "alert sent by e-mail to ops@example.test" in run.err and "alert sent by webhook" in run.err
    assert smtp.envelopes == [("portal-export@example.test", ["ops@example.test"])]
    assert_no_secret(smtp, hook, run, data_dir)


@pytest.mark.unmeasured
def test_under_luigid_a_revoked_key_sends_one_message_even_when_luigid_has_a_receiver(
    channels, cli, data_dir, tmp_path
):
    """luigid's own "DISABLED ... due to excessive failures" mails stay off, even with [email]
    and [smtp] in its config (as a machine-wide /etc/luigi/luigi.cfg would give it)."""
    smtp, hook, _ = channels
    central = Luigid(tmp_path / "luigid", extra=smtp.cfg())
    try:
        start, stop = "2026-07-01", "2026-07-31"
        run = cli("backfill", start, stop, CAPTCHAAI_API_KEY=UNKNOWN_KEY, **central.env)
        assert run.code == TASK_FAILED, run
        assert "scheduler: central" in run.err
        assert len(central.task_list("DISABLED")) == 120  # every region failed on luigid
    finally:
        central.stop()
    subject, body = one_message_each(smtp, hook)
    assert subject == "backfill 2026-07-01..2026-07-30: 30 of 30 days missing"
    assert all(str(d) in body for d in days(start, stop))
    assert "- every region ERROR_KEY_DOES_NOT_EXIST (30 days):" in body
    assert_no_secret(smtp, hook, run, data_dir)


@pytest.mark.unmeasured
def test_a_clean_run_sends_nothing_and_prints_a_progress_line_per_day(channels, cli, data_dir):
    smtp, hook, layer = channels
    layer({"portal": {"regions": "north"}})
    run = cli("backfill", "2026-06-01", "2026-06-04")

    assert run.code == 0, run
    assert smtp.raw == [] and hook.raw == []
    progress = re.findall(r"^day (\S+) done: (\d) of 3(, about \d+ s left)?$", run.err, re.M)
    assert sorted(d for d, _, _ in progress) == ["2026-06-01", "2026-06-02", "2026-06-03"]  # each day once
    assert [(n, bool(left)) for _, n, left in progress] == [("1", True), ("2", True), ("3", False)]
    assert run.err.rstrip().endswith("backfill 2026-06-01..2026-06-03: all 3 days complete")
    assert "alert sent" not in run.err and "alert not" not in run.err
    assert_no_secret(smtp, hook, run, data_dir)


def test_a_ctrl_c_mid_backfill_stops_the_run_and_alerts_no_one(channels, cli, data_dir, live):
    """The operator is there: Ctrl-C (SIGINT, as the terminal sends it) ends the run with its days
    unfinished, and no alert goes out for them; what it wrote is whole."""
    smtp, hook, layer = channels
    layer({"portal": {"regions": "north"}, "captchaai": polls(2.0)})
    # solves of 2 s, 30 days: the run is mid-way when it is stopped, even if a loaded machine reads
    # its first "done" line late (10 days could end unseen between two looks, the Ctrl-C then too late)
    live.configure(solve_s=200.0)
    proc = cli.start("backfill", "2026-06-01", "2026-07-01")
    deadline = time.monotonic() + scaled(30)
    while not re.search(r"^day \S+ done: 1 of 30", cli.output(proc)[1], re.M):
        assert proc.poll() is None and time.monotonic() < deadline, cli.output(proc)
        time.sleep(0.05)
    assert proc.poll() is None, cli.output(proc)  # still running when the operator presses Ctrl-C
    # once, also when it lands while Luigi forks a task process, where Python drops it (ops/stopping.py)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=scaled(10))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run still runs 10 s after Ctrl-C: {cli.output(proc)}")
    out, err = cli.output(proc)

    assert code == 130, err  # as a shell reports a command Ctrl-C ended, in one line, no traceback
    assert err.rstrip().splitlines()[-1] == (
        "backfill: interrupted; every day written is whole, the same command again finishes the rest"
    )
    assert err.count("Traceback") == err.count("Exception ignored in"), err  # only Python's word on a dropped Ctrl-C
    assert smtp.raw == [] and hook.raw == []
    assert "alert sent" not in err and "days missing" not in err
    done = sorted(p.name for p in data_dir.glob("portal_records_*.jsonl"))
    assert 1 <= len(done) < 30, done
    for name in done:  # every day written is whole: as many records as the sandbox has for it
        day = name.removeprefix("portal_records_").removesuffix(".jsonl")
        assert len((data_dir / name).read_text().splitlines()) == len(live.expected_records(day, "north")), name
    assert not [p for p in data_dir.rglob("*") if ".tmp" in p.name]


def test_a_p95_above_the_line_sends_one_warning(channels, cli, data_dir):
    smtp, hook, layer = channels
    layer({"portal": {"regions": "north"}, "alerts": {"p95_warn_s": 0.001}})  # sandbox solves take ~50 ms
    run = cli("backfill", "2026-06-01", "2026-06-03")

    assert run.code == 0, run
    subject, body = one_message_each(smtp, hook)
    assert subject == "backfill 2026-06-01..2026-06-02: all 2 days complete, 1 warning"
    assert re.search(r"p95 solve time above 0.001 s on 2 days: 2026-06-01 \d+\.\d s, 2026-06-02 \d+\.\d s", body)
    assert "What to do next" not in body and "exit code 0" in body
    assert_no_secret(smtp, hook, run, data_dir)


@pytest.mark.unmeasured
def test_all_plan_threads_busy_at_the_start_sends_one_warning(channels, cli, live, data_dir):
    smtp, hook, layer = channels
    # the region waits out the busy threads, for the plan's next reading (1 s on, not 30)
    layer({"portal": {"regions": "north", "retry_base_s": 0.2}, "captchaai": {"plan_every_s": 1}})
    # Another consumer holds every thread (0.3 s of the sandbox's time) until the run's plan check has
    # seen them: the clock stands still meanwhile, however slowly the run starts on a loaded machine.
    assert live.occupy_threads(5, 30) == 5
    live.pause_clock()
    proc = cli.start("export", "2026-06-05")
    while proc.poll() is None and "plan: 5 threads" not in cli.output(proc)[1]:
        time.sleep(0.05)
    live.resume_clock()
    proc.wait(timeout=scaled(60))
    run = CliRun(proc.returncode, *cli.output(proc), 0.0)

    assert run.code == 0, run
    assert "warning: plan: all 5 threads are busy now" in run.err
    subject, body = one_message_each(smtp, hook)
    assert subject == "export 2026-06-05: complete, 1 warning"
    assert "all 5 plan threads were busy with other consumers of the key when the run started" in body


@pytest.mark.unmeasured
def test_a_validation_failure_sends_one_alert_naming_the_day_and_its_ratio(channels, cli, live, data_dir):
    smtp, hook, _ = channels
    live.configure(unsolvable_sitekeys=frozenset({"north", "south"}))
    run = cli("export", "2026-06-07")

    assert run.code == TASK_FAILED, run
    subject, body = one_message_each(smtp, hook)
    assert subject == "export 2026-06-07: missing"
    assert "- 2026-06-07: unsolvable ratio 0.50 (north, south)" in body
    assert "make retry-unsolvable DAY=2026-06-07" in body
    assert "Rerun" not in body  # the same facts would fail the same validation
    assert_no_secret(smtp, hook, run, data_dir)

    again = cli("retry-unsolvable", "2026-06-07")  # still unsolvable: the retry's own one alert
    assert again.code == TASK_FAILED, again
    assert len(smtp.raw) == len(hook.raw) == 2
    subject, body = smtp.texts()[1]
    assert subject == "retry-unsolvable 2026-06-07: missing" and "unsolvable ratio 0.50 (north, south)" in body


def day_dir_snapshot(data_dir):
    """What a run left in the data dir: file names, and the content of the ones that do not hold timings."""
    snapshot = {}
    for path in sorted(data_dir.rglob("*")):
        rel = path.relative_to(data_dir)
        if path.is_dir() or rel.parts[0] == "_state" or "failures" in rel.parts:
            continue
        holds_timings = rel.parts[0] == "regions"  # a region target's facts: its task ids and times
        snapshot[str(rel)] = path.read_text() if path.suffix == ".jsonl" and not holds_timings else None
    return snapshot


@pytest.mark.parametrize("dead", ["smtp-unreachable", "webhook-500", "webhook-hangs"])
def test_a_dead_channel_changes_neither_exit_code_nor_files_and_says_so_in_one_line(
    dead,
    channels,
    cli,
    live,
    data_dir,
    tmp_path,
    webhook,
):
    smtp, hook, layer = channels
    regions = {"portal": {"regions": "north,south"}, "alerts": {"webhook_timeout_s": 0.5}}
    live.configure(unsolvable_sitekeys=frozenset({"north"}))  # 2026-06-10 fails validation...
    args = ("backfill", "2026-06-10", "2026-06-12")

    layer(regions, smtp=None)  # no channel at all: the reference run
    reference_dir = tmp_path / "reference"
    reference = cli(*args, PORTAL_DATA_DIR=str(reference_dir), ALERT_WEBHOOK_URL="")
    assert reference.code == TASK_FAILED and "alert " not in reference.err.replace("wt-alerts", ""), reference

    if dead == "smtp-unreachable":
        dead_smtp = smtp.cfg()
        dead_smtp["smtp"]["port"] = free_port()
        layer({**regions, **dead_smtp}, smtp=None)
    else:
        hook = webhook("500" if dead == "webhook-500" else "hang")
        layer(regions)
    run = cli(*args, ALERT_WEBHOOK_URL=hook.url, timeout=30)

    assert run.code == reference.code, run
    assert day_dir_snapshot(data_dir) == day_dir_snapshot(reference_dir)
    warnings = [line for line in run.err.splitlines() if line.startswith("warning: alert not delivered")]
    channel, error = {
        "smtp-unreachable": ("e-mail to ops@example.test (smtp 127.0.0.1:", "Connection refused"),
        "webhook-500": ("webhook (ALERT_WEBHOOK_URL)", "answered HTTP 500"),
        "webhook-hangs": ("webhook (ALERT_WEBHOOK_URL)", "no answer within 0.5 s"),
    }[dead]
    assert len(warnings) == 1 and channel in warnings[0] and error in warnings[0], warnings
    assert run.seconds < reference.seconds + scaled(5), (run.seconds, reference.seconds)
    live_channel = "webhook" if dead == "smtp-unreachable" else "e-mail"
    assert f"alert sent by {live_channel}" in run.err  # the other channel still works
    assert "Not able to connect to smtp server" not in run.err.replace(warnings[0], "")  # said once
    assert_no_secret(smtp, hook, run, data_dir)


def test_alert_test_sends_through_every_channel_and_says_which_worked(channels, cli, webhook):
    smtp, hook, _ = channels
    run = cli("alert-test")
    assert run.code == 0, run
    assert "alert-test: e-mail to ops@example.test (smtp 127.0.0.1:" in run.err
    assert re.search(r"alert-test: e-mail to .*: ok$", run.err, re.M)
    assert "alert-test: webhook (ALERT_WEBHOOK_URL): ok" in run.err
    assert len(smtp.raw) == 1 and len(hook.raw) == 1
    assert smtp.texts()[0][0].startswith("portal-export alert test from ")

    broken = webhook("500")
    run = cli("alert-test", ALERT_WEBHOOK_URL=broken.url)
    assert run.code == 1, run
    assert "alert-test: webhook (ALERT_WEBHOOK_URL): FAILED: answered HTTP 500" in run.err
    assert len(smtp.raw) == 2
    assert broken.url not in run.err and hook.url not in run.err

    none = cli("alert-test", ALERT_WEBHOOK_URL="", LUIGI_CONFIG_PATH="")
    assert none.code == 2 and "no channel configured" in none.err


@pytest.mark.unmeasured
def test_a_refused_login_sends_the_one_alert_naming_its_code_and_solves_nothing(
    live, channels, cli, data_dir, monkeypatch
):
    """A night whose portal password changed: refused before any CaptchaAI request, and still the
    one alert a failed night sends, with the breaker and what clears it."""
    smtp, hook, _ = channels
    live.configure(variants={"*": {"login"}})
    monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
    monkeypatch.setenv("PORTAL_PASSWORD", PASSWORD)  # not the sandbox's: refused
    start, stop = "2026-07-01", "2026-07-04"

    run = cli("backfill", start, stop)

    assert run.code == 2, run
    assert "error: PORTAL_LOGIN_REFUSED" in run.err
    subject, body = one_message_each(smtp, hook)
    assert subject == "backfill 2026-07-01..2026-07-03: 3 of 3 days missing"
    assert "PORTAL_LOGIN_REFUSED" in body and "make clear-breaker" in body
    assert live.tasks() == [] and live.stats()["requests"].get("in.php", 0) == 0
    assert_no_secret(smtp, hook, run, data_dir)
