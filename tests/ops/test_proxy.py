"""luigid behind an authenticating reverse proxy (README "luigid on a network, behind a proxy"):
LUIGI_SCHEDULER_URL carries the proxy's credentials, every command that talks to luigid works
through it, and the password is found nowhere: not in what make prints, not in a log, not in
luigid's state file or task history, not in the data dir.

The proxy is tests/helpers/auth_proxy.py (real HTTP on loopback, basic auth, the credentials not passed
on, as the README's nginx site does); tests/repo/test_readme_nginx.py runs the README's own site.
"""

import datetime
import logging
import os
import subprocess
import sys
from urllib.parse import quote

import pytest
import requests

from ops import luigid as scheduler_url
from ops.cli import main
from ops.luigid import remote
from tasks.secrets import scrub, url_password
from tests import ROOT
from tests.helpers.auth_proxy import AuthProxy
from tests.helpers.runs import Luigid

NORTH = {"portal": {"regions": "north"}}
DAY = datetime.date(2026, 9, 1)
# ASCII, with what a URL must percent-encode: the scrubbing must catch it as written and decoded
PASSWORD = "Pr0xy:p@ss/w%rd-7f3c9a"
USER = "ops-7q"  # not a secret; distinct enough to look for


@pytest.fixture
def proxied(tmp_path, monkeypatch):
    """luigid behind an AuthProxy; LUIGI_SCHEDULER_URL points at the proxy with its credentials."""
    server = Luigid(tmp_path / "luigid", history=True)
    proxy = AuthProxy(server.url, USER, PASSWORD)
    proxy.luigid = server
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", proxy.url_with())
    yield proxy
    proxy.stop()
    server.stop()


def make(*argv, **env):
    """`make TARGET VAR=...` as an operator types it; its whole output (recipe lines included)."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("make test creates .venv; this runs there")
    run = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    return run.returncode, run.stdout + run.stderr


def password_forms():
    forms = url_password(os.environ["LUIGI_SCHEDULER_URL"])
    assert forms == {PASSWORD, "Pr0xy%3Ap%40ss%2Fw%25rd-7f3c9a"}  # as decoded, and as in the URL
    return forms


def files_holding(root, forms):
    return [p for p in root.rglob("*") if p.is_file() and any(f.encode() in p.read_bytes() for f in forms)]


def test_the_proxy_refuses_a_request_without_the_credentials_and_so_does_every_run(
    live,
    proxied,
    cli,
    data_dir,
    webhook,
):
    assert requests.get(f"{proxied.url}/api/task_list", timeout=5).status_code == 401
    assert requests.get(proxied.url_with(password="guess") + "/api/task_list", timeout=5).status_code == 401
    assert requests.get(proxied.url_with() + "/api/task_list", timeout=5).status_code == 200

    bare = cli("export", DAY, SCHEDULER="auto", LUIGI_SCHEDULER_URL=proxied.url)
    hook = webhook()
    wrong = cli(
        "export",
        DAY,
        SCHEDULER="auto",
        LUIGI_SCHEDULER_URL=proxied.url_with(password="guess-1234"),
        ALERT_WEBHOOK_URL=hook.url,
    )

    # auto does not fall back to a local scheduler: that would drop the cap the runs share
    assert bare.code == wrong.code == 2
    assert (
        f"error: the central scheduler at {proxied.url} refused a request without credentials: "
        "put USER:PASSWORD@ in LUIGI_SCHEDULER_URL (HTTP 401)\n"
    ) in bare.err
    port = proxied.url.rsplit(":", 1)[1]
    assert (
        f"error: the central scheduler at http://ops-7q:***@127.0.0.1:{port} refused the credentials in "
        "LUIGI_SCHEDULER_URL (HTTP 401)\n"
    ) in wrong.err
    assert "guess-1234" not in wrong.err + wrong.out
    (alert,) = hook.texts()  # the night failed: its one alert says why, without the password
    assert alert.startswith(f"export {DAY}: ") and "refused the credentials in LUIGI_SCHEDULER_URL" in alert
    assert "ops-7q:***@" in alert and "guess-1234" not in alert
    assert live.tasks() == [] and not any(data_dir.glob("portal_records_*"))  # nothing sent to CaptchaAI
    assert proxied.paths(authorized=True) == ["/api/task_list"]  # the one request above


def test_plan_export_backfill_and_the_cap_change_go_through_the_proxy_and_the_password_is_nowhere(
    live, fast_cfg, proxied, data_dir, tmp_path
):
    fast_cfg(NORTH)
    forms = password_forms()
    port = proxied.url.rsplit(":", 1)[1]
    shown = f"http://ops-7q:***@127.0.0.1:{port}"
    assert live.occupy_threads(2, 1000) == 2  # another consumer holds 2 of the 5 plan threads for 10 s

    plan_code, plan = make("plan", SCHEDULER="auto")
    export_code, export = make("export", f"DAY={DAY}", SCHEDULER="auto")
    backfill_code, backfill = make("backfill", "START=2026-09-02", "STOP=2026-09-04", SCHEDULER="central")
    retry_code, retry = make("retry-unsolvable", f"DAY={DAY}", SCHEDULER="central")

    assert plan_code == 0, plan
    assert f"scheduler: central at {shown} (visualiser: {proxied.url})" in plan
    assert f"cap 4 solves (luigid's at {shown})" in plan  # luigid's cap, read through the proxy
    assert "cap: 2 of 4 configured, following the plan (another consumer holds 2 of 5 plan threads" in plan
    assert export_code == 0, export[-3000:]
    assert f"scheduler: central at {shown}" in export
    assert f"cap 2 (luigid's at {shown}, configured 4): another consumer holds 2 of 5 plan threads" in export
    assert backfill_code == 0, backfill[-3000:]
    assert "backfill 2026-09-02..2026-09-03: all 2 days complete" in backfill
    assert retry_code == 0, retry[-3000:]
    assert f"scheduler: central at {shown}" in retry and "has no region given up as unsolvable" in retry
    for day in ("2026-09-01", "2026-09-02", "2026-09-03"):
        assert (data_dir / f"portal_records_{day}.jsonl").exists()
    # luigid got the runs, through the proxy, every request with the credentials
    done = proxied.luigid.task_list("DONE")
    assert sorted(t["name"] for t in done.values()) == ["DayExport"] * 3 + ["RangeDaily"] + ["RegionExport"] * 3
    paths = proxied.paths(authorized=True)
    assert {"/api/add_task", "/api/get_work", "/api/resource_list", "/api/re_enable_task"} - set(paths) == {
        "/api/re_enable_task"  # nothing was disabled
    }
    assert paths.count("/api/update_resource") >= 2  # the governor's cap 2, and the configured 4 back
    assert proxied.paths(authorized=False) == []
    assert {r["name"]: r["num_total"] for r in proxied.luigid.rpc("resource_list")} == {"captchaai": 4}

    # the password: not in make's output, not in what luigid serves (the visualiser's data)
    served = "".join(
        requests.get(f"{proxied.luigid.url}/api/{m}", timeout=5).text
        for m in ("task_list", "worker_list", "resource_list")
    )
    assert "RegionExport" in served and USER not in served  # luigid never saw the login
    for text in (plan, export, backfill, retry, served):
        assert not any(f in text for f in forms)
    proxied.luigid.stop()  # luigid writes its state file on the way out
    luigid_home = tmp_path / "luigid"
    assert {"state.pickle", "history.db", "luigid.log"} <= {p.name for p in luigid_home.iterdir()}
    assert files_holding(tmp_path, forms) == []  # luigid's state, history and log; the data dir; the logs


def test_luigis_own_rpc_errors_name_the_scheduler_without_the_password(proxied, luigi_cfg, caplog, capsys):
    """Luigi logs its retries with the URL as given, and raises RPCError with it; requests' HTTPError
    holds the URL it prepared (percent-encoded). Every such text leaves through the scrubber."""
    forms = password_forms()
    luigi_cfg("core", "rpc-retry-wait", 0)
    proxied.expected = "Basic cm90YXRlZA=="  # the proxy's password changed: every request is refused now
    caplog.set_level(logging.INFO)

    with pytest.raises(Exception) as raised:
        remote(os.environ["LUIGI_SCHEDULER_URL"]).resource_list()

    texts = [str(raised.value), str(raised.value.sub_exception)]
    assert all(any(f in t for f in forms) for t in texts)  # so the scrubbing below is what hides it
    assert "Failed connecting to remote scheduler 'http://ops-7q:***@127.0.0.1:" in caplog.text
    assert not any(f in caplog.text for f in forms)
    for text in texts:
        assert not any(f in scrub(text) for f in forms) and "ops-7q:***@" in scrub(text)


def test_an_uncaught_error_prints_its_traceback_without_the_password(proxied):
    """A traceback Python prints itself, in the main thread or another one."""
    forms = password_forms()
    code = (
        "import os, threading, tasks\n"
        "url = os.environ['LUIGI_SCHEDULER_URL']\n"
        "t = threading.Thread(target=lambda: 1 / 0 if url else None)\n"
        "t.start(); t.join()\n"
        "raise RuntimeError(url)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "ZeroDivisionError" in run.stderr and "RuntimeError: http://ops-7q:***@127.0.0.1:" in run.stderr
    assert not any(f in run.stderr for f in forms)


@pytest.mark.parametrize(
    "url, problem",
    [
        ("ftp://127.0.0.1:8082", "give http(s)://[USER:PASSWORD@]HOST:PORT"),
        ("http://:8082", "give http(s)://[USER:PASSWORD@]HOST:PORT"),
        ("http://127.0.0.1:80x2", "not a URL (Port could not be cast to integer value as '80x2')"),
        (
            "https://ops:p%C3%A4ss@sched:8443",
            "the password must be ASCII (Luigi's HTTP client sends basic-auth credentials as Latin-1)",
        ),
        (
            "https://öps:pass@sched:8443",
            "the user must be ASCII (Luigi's HTTP client sends basic-auth credentials as Latin-1)",
        ),
    ],
)
def test_a_bad_scheduler_url_is_refused_in_one_line_without_its_password(url, problem, monkeypatch, capsys):
    monkeypatch.setenv("CAPTCHAAI_API_KEY", "k" * 32)
    monkeypatch.setenv("SCHEDULER", "central")
    monkeypatch.setenv("LUIGI_SCHEDULER_URL", url)
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: LUIGI_SCHEDULER_URL={scheduler_url.shown(url)}: {problem}\n"
    assert "p%C3%A4ss" not in err and "pass@" not in err


def test_the_url_is_shown_without_its_password():
    assert scheduler_url.shown("https://ops:s3cret@sched:8443/") == "https://ops:***@sched:8443/"
    assert scheduler_url.shown("http://ops@sched:8082") == "http://ops@sched:8082"
    assert scheduler_url.shown("http://127.0.0.1:8082") == "http://127.0.0.1:8082"
    assert scheduler_url.shown("http://ops:x@[::1") == "***"  # malformed: nothing of it
    assert scheduler_url.bare("https://ops:s3cret@sched:8443/") == "https://sched:8443/"
    assert url_password("https://ops:a%40b@sched:8443/x?y=1") == {"a%40b", "a@b"}
    assert url_password("https://sched:8443/a:b@c") == set()  # an @ in the path is no user info


def test_the_probe_names_a_certificate_that_fails_verification(monkeypatch, capsys):
    """An https URL whose server's certificate this host does not trust: one line saying so, not a
    silent local run. (The server here speaks plain HTTP: the TLS handshake fails the same way.)"""
    proxy = AuthProxy("http://127.0.0.1:9", "ops", PASSWORD)
    try:
        monkeypatch.setenv("CAPTCHAAI_API_KEY", "k" * 32)
        monkeypatch.setenv("LUIGI_SCHEDULER_URL", proxy.url_with().replace("http://", "https://"))
        assert main(["plan"]) == 2
    finally:
        proxy.stop()
    err = capsys.readouterr().err
    assert err.startswith("error: the central scheduler at https://ops:***@127.0.0.1:") and err.count("\n") == 1
    assert "failed TLS verification (SSLError): REQUESTS_CA_BUNDLE=" in err
    assert PASSWORD not in err


def test_a_url_naming_a_server_that_is_not_luigid_fails_in_one_line_without_the_password(
    tmp_path, monkeypatch, luigi_cfg, capsys
):
    """It answers the probe (a plain web server: GET works) but not luigid's RPCs: Luigi's RPCError,
    which names the URL as given, becomes one line with the password masked."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        luigi_cfg("core", "rpc-retry-wait", 0)
        monkeypatch.setenv("CAPTCHAAI_API_KEY", "k" * 32)
        url = f"http://ops:{quote(PASSWORD, safe='')}@127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv("LUIGI_SCHEDULER_URL", url)
        forms = password_forms()
        assert main(["plan"]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"scheduler: central at http://ops:***@127.0.0.1:{server.server_address[1]} " + (
        f"(visualiser: http://127.0.0.1:{server.server_address[1]})"
    )
    assert err[-1].startswith(
        "error: Errors (3 attempts) when connecting to remote scheduler 'http://ops:***@127.0.0.1:"
    )
    assert "501 Server Error: Unsupported method ('POST')" in err[-1]
    assert not any(f in line for line in err for f in forms)
