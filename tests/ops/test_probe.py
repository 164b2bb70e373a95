"""`make probe`: what an export would solve and post, for every variant; nothing sent to CaptchaAI."""

import os
import subprocess
import threading

import pytest
from werkzeug.serving import make_server
from werkzeug.wrappers import Response

from ops.cli import main
from sandbox import SANDBOX_PASSWORD, SANDBOX_USER, VARIANTS, sitekey_for
from tests import ROOT  # noqa: E402

DAY = "2026-09-01"


def probe(capsys, *argv):
    code = main(["probe", DAY, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def field_line(out):
    return next(line for line in out.splitlines() if line.startswith("fields:"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_probe_every_variant_and_send_nothing_to_captchaai(variant, live, capsys, monkeypatch):
    live.configure(variants={"north": {variant}})
    if variant == "login":
        monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
        monkeypatch.setenv("PORTAL_PASSWORD", SANDBOX_PASSWORD)

    code, out, err = probe(capsys, "--region", "north")

    assert code == 0, err
    assert live.stats()["requests"].get("in.php", 0) == live.stats()["requests"].get("res.php", 0) == 0
    assert f"sitekey:      {sitekey_for('north')}" in out
    assert "pageurl:      " + live.portal_url in out and "answer:" in out
    kind = "invisible" if variant == "invisible" else "enterprise checkbox" if variant == "enterprise" else "checkbox"
    assert f"widget kind:  {kind}\n" in out
    assert ("data-s:       present" if variant == "data-s" else "data-s:       absent") in out
    action = {"action": "/reports/run", "get": "/export/run"}.get(variant, "/export")
    method = "GET" if variant == "get" else "POST"
    assert f"form:         {method} {live.portal_url}{action}\n" in out
    fields = field_line(out)
    assert "g-recaptcha-response=<token>" in fields
    if variant == "csrf":
        assert "csrf_token=***" in fields
    if variant == "action":  # hidden values masked, visible ones shown, day and region added
        assert "__VIEWSTATE=***" in fields and "__EVENTVALIDATION=***" in fields
        assert "layout=long" in fields and f"day={DAY} (added)" in fields and "region=north (added)" in fields
    else:
        assert "day=***" in fields and "region=***" in fields
    if variant == "frame":
        assert f"frame:        {live.portal_url}/export/form?day={DAY}&region=north" in out
        assert f"pageurl:      {live.portal_url}/export/form?" in out
    if variant == "login":
        assert f"login:        {SANDBOX_USER} at {live.portal_url}/login" in out
        assert SANDBOX_PASSWORD not in out + err


def test_probe_defaults_to_the_first_configured_region(live, fast_cfg, capsys):
    fast_cfg({"portal": {"regions": "west_1,north"}})
    code, out, _ = probe(capsys)
    assert code == 0 and "region west_1 " in out and sitekey_for("west_1") in out


def test_probe_without_a_widget_exits_non_zero_with_the_reason(live, capsys):
    live.configure(variants={"north": {"login"}})  # no credentials: the login page, no widget on it
    code, out, err = probe(capsys, "--region", "north")
    assert code != 0
    assert err.startswith("error: no reCAPTCHA widget") and "'Sign in · Partner portal'" in err
    assert err.rstrip().endswith("it is a login form: set PORTAL_USERNAME and PORTAL_PASSWORD")
    assert f"page:         {live.portal_url}/login?next=" in out
    assert live.stats()["requests"].get("in.php", 0) == 0


@pytest.fixture
def loose_widget_portal(live, monkeypatch):
    """A portal whose widget sits outside any form."""
    page = f'<html><title>x</title><div class="g-recaptcha" data-sitekey="{sitekey_for("north")}"></div></html>'
    server = make_server("127.0.0.1", 0, Response(page, mimetype="text/html"), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    monkeypatch.setenv("PORTAL_BASE_URL", f"http://127.0.0.1:{server.port}")
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()
    thread.join()


def test_probe_without_a_form_says_the_simple_post_would_be_made_and_exits_non_zero(loose_widget_portal, capsys):
    code, out, err = probe(capsys, "--region", "north")
    assert code != 0 and err.startswith("error: no <form> around the widget")
    assert f"form:         POST {loose_widget_portal}/export (no <form> around the widget)" in out
    assert f"day={DAY} (added), region=north (added), g-recaptcha-response=<token>" in field_line(out)


@pytest.mark.parametrize(
    "argv, message", [(["probe", "2026-13-01"], "is not a date"), (["probe", DAY, "--region", "a/b"], "'a/b'")]
)
def test_probe_refuses_bad_input_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.unmeasured
def test_make_probe_through_the_makefile(live):
    live.configure(variants={"south": {"frame", "invisible", "csrf"}})
    env = {**os.environ, "PATH": os.environ["PATH"]}
    run = subprocess.run(
        ["make", "-s", "probe", f"DAY={DAY}", "REGION=south"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "widget kind:  invisible" in run.stdout and "csrf_token=***" in run.stdout
    assert "/export/form?" in run.stdout
    bad = subprocess.run(
        ["make", "-s", "probe", "DAY=tomorrow"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "DAY='tomorrow' is not a date" in bad.stderr
