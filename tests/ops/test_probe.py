"""`make probe`: what an export would solve and post, for every variant; nothing sent to CaptchaAI."""

import os
import subprocess
import threading

import pytest
from werkzeug.serving import make_server
from werkzeug.wrappers import Response

from ops.cli import main
from sandbox import SANDBOX_PASSWORD, SANDBOX_USER, VARIANTS, sitekey_for
from sandbox.daily_report import default_day
from tests import ROOT  # noqa: E402
from tests.helpers.cfg import DAILY_REPORT

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


@pytest.fixture
def daily_report(live):
    live.configure(shape="daily-report")
    return live


def test_probe_shows_each_field_a_shaped_portal_would_get_and_the_checks(daily_report, fast_cfg, capsys):
    fast_cfg({"portal": DAILY_REPORT})
    code, out, err = probe(capsys, "--region", "west")
    assert code == 0, err
    assert (
        f"export page:  /reports/daily (region value 'NW-04')\npage:         {daily_report.portal_url}/reports/daily\n"
        in out
    )
    assert f"form:         POST {daily_report.portal_url}/reports/daily\n" in out  # no action: the page's URL
    assert field_line(out) == (
        "fields:       _token=***, report_date=01.09.2026 (set), market=NW-04 (set), g-recaptcha-response=<token>"
    )
    assert "export_fields: fits the form\nrecord checks: date=01.09.2026, market=NW-04\n" in out
    assert err == "" and daily_report.stats()["requests"].get("in.php", 0) == 0


def test_probe_sets_a_select_by_its_label_to_its_value(daily_report, fast_cfg, capsys):
    fast_cfg({"portal": {**DAILY_REPORT, "region_values": "west=North-West"}})
    code, out, err = probe(capsys, "--region", "west")
    assert code == 0, err
    assert "market=NW-04 (set)" in field_line(out)


def test_probe_refuses_a_value_the_select_lacks_listing_what_it_offers(daily_report, fast_cfg, capsys):
    fast_cfg({"portal": {**DAILY_REPORT, "region_values": "west=WE-04"}})
    code, out, err = probe(capsys, "--region", "west")
    assert code == 1
    assert "export_fields: does not fit the form (1 value(s) no <select> offers, below)" in out
    assert err == (
        "error: field 'market' is a <select> without the value 'WE-04'; it offers 'NE-01' (North-East), "
        "'SE-02' (South-East), 'SW-03' (South-West), 'NW-04' (North-West), 'CE-05' (Central): "
        "an export would fail with PORTAL_FIELD_VALUE before its solve\n"
    )


def test_probe_warns_of_a_field_the_form_lacks_and_shows_the_one_left_as_the_page_gave_it(
    daily_report, fast_cfg, capsys
):
    fast_cfg({"portal": {**DAILY_REPORT, "export_fields": "report_dat={day:DD.MM.YYYY}, market={region}"}})
    code, out, err = probe(capsys, "--region", "north")
    assert code == 0
    assert f"report_date={default_day():%d.%m.%Y}, market=NE-01 (set), report_dat=01.09.2026 (added)" in out
    assert "export_fields: fits the form; adds report_dat, which it lacks" in out
    assert err.startswith("warning: the form has no field 'report_dat': export_fields adds it")


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
