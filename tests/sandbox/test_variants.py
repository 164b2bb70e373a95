"""The sandbox portal's variants refuse what a real site refuses (driven by hand, without the client)."""

import re

import pytest
import requests

from sandbox import SANDBOX_KEY, SANDBOX_PASSWORD, SANDBOX_USER, Sandbox, SandboxConfig, sitekey_for

DAY = "2024-03-01"


@pytest.fixture
def make_sb():
    started = []

    def make(**fields):
        sb = Sandbox(SandboxConfig(seed=5, time_scale=0.01, solve="fixed", solve_s=0.1, **fields)).start()
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop()


def token_for(sb, pageurl, region="north", **kind):
    fields = {
        "key": SANDBOX_KEY,
        "json": 1,
        "method": "userrecaptcha",
        "googlekey": sitekey_for(region),
        "pageurl": pageurl,
    }
    task_id = requests.post(f"{sb.captchaai_url}/in.php", data={**fields, **kind}, timeout=5).json()["request"]
    for _ in range(200):
        answer = requests.post(
            f"{sb.captchaai_url}/res.php",
            data={"key": SANDBOX_KEY, "json": 1, "action": "get", "id": task_id},
            timeout=5,
        ).json()
        if answer["status"] == 1:
            return answer["request"]
    raise AssertionError("not solved")


def hidden(page, name):
    return re.search(rf'name="{re.escape(name)}" value="([^"]*)"', page.text).group(1)


def test_csrf_must_come_back_and_is_bound_to_the_session(make_sb):
    sb = make_sb(variants={"north": {"csrf"}})
    s = requests.Session()
    page = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
    csrf = hidden(page, "csrf_token")
    base = {"day": DAY, "region": "north", "g-recaptcha-response": "x"}
    assert s.post(f"{sb.portal_url}/export", data=base, timeout=5).json() == {"error": "bad-field-csrf_token"}
    other = requests.Session()
    other.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
    assert other.post(f"{sb.portal_url}/export", data={**base, "csrf_token": csrf}, timeout=5).json() == {
        "error": "bad-field-csrf_token"
    }
    token = token_for(sb, page.url)
    ok = s.post(f"{sb.portal_url}/export", data={**base, "csrf_token": csrf, "g-recaptcha-response": token}, timeout=5)
    assert ok.status_code == 200 and ok.json()["records"]


def test_the_form_must_go_to_its_action(make_sb):
    sb = make_sb(variants={"north": {"action"}})
    s = requests.Session()
    page = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
    assert 'action="/reports/run"' in page.text
    posted = s.post(
        f"{sb.portal_url}/export", data={"day": DAY, "region": "north", "g-recaptcha-response": "x"}, timeout=5
    )
    assert posted.json() == {"error": "wrong-action"}


@pytest.mark.parametrize(
    "variant, sent, reason",
    [
        ("invisible", {}, "wrong-widget-kind"),
        ("enterprise", {"invisible": "1"}, "wrong-widget-kind"),
        ("data-s", {"data-s": "not-the-page-s"}, "wrong-data-s"),
        (None, {"enterprise": "1"}, "wrong-widget-kind"),  # the simplest page: a kind it does not have
    ],
)
def test_a_token_solved_for_another_widget_kind_is_refused(make_sb, variant, sent, reason):
    sb = make_sb(variants={"north": {variant}} if variant else {})
    s = requests.Session()
    page = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
    token = token_for(sb, page.url, **sent)
    posted = s.post(
        f"{sb.portal_url}/export", data={"day": DAY, "region": "north", "g-recaptcha-response": token}, timeout=5
    )
    assert (posted.status_code, posted.json()) == (403, {"error": reason})
    assert [t for t in sb.tasks() if t["id"]][0]["enterprise"] == (sent.get("enterprise") == "1")


def test_login_needs_its_csrf_field_and_the_right_password(make_sb):
    sb = make_sb(variants={"north": {"login"}})
    s = requests.Session()
    first = s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5)
    assert first.url.startswith(f"{sb.portal_url}/login?next=") and 'type="password"' in first.text
    csrf = hidden(first, "authenticity_token")
    form = {"authenticity_token": csrf, "session[email]": SANDBOX_USER, "session[password]": "wrong"}
    again = s.post(f"{sb.portal_url}/login", data=form, timeout=5)
    assert again.status_code == 200 and "Invalid e-mail or password" in again.text
    forged = s.post(
        f"{sb.portal_url}/login",
        data={**form, "authenticity_token": "x", "session[password]": SANDBOX_PASSWORD},
        timeout=5,
    )
    assert forged.status_code == 403
    csrf = hidden(s.get(f"{sb.portal_url}/login", timeout=5), "authenticity_token")
    done = s.post(
        f"{sb.portal_url}/login",
        data={**form, "authenticity_token": csrf, "session[password]": SANDBOX_PASSWORD, "next": "/welcome"},
        timeout=5,
    )
    assert done.url == f"{sb.portal_url}/welcome"
    assert (
        "data-sitekey"
        in s.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5).text.lower()
    )
    assert sb.stats()["logins"] == {"refused-credentials": 1, "refused-csrf": 1, "ok": 1}


def test_unknown_variant_names_are_refused():
    with pytest.raises(ValueError, match="unknown variant"):
        SandboxConfig(variants={"north": {"captcha-v3"}})


def test_the_daily_report_portal_checks_its_token_and_market_and_answers_its_default_day(make_sb):
    from sandbox.daily_report import MARKETS, default_day
    from sandbox.portal_data import report_records

    sb = make_sb(shape="daily-report")
    assert requests.get(f"{sb.portal_url}/export", params={"day": DAY, "region": "north"}, timeout=5).status_code == 404
    s = requests.Session()
    url = f"{sb.portal_url}/reports/daily"
    page = s.get(url, timeout=5)
    assert [code for code, _ in MARKETS] == re.findall(r'<option value="([^"]+)"', page.text)
    token = hidden(page, "_token")
    base = {"report_date": "01.03.2024", "market": "SE-02"}
    assert s.post(url, data={**base, "market": "XX-99", "_token": token}, timeout=5).json() == {"error": "bad-market"}
    assert s.post(url, data={**base, "report_date": "2024-03-01", "_token": token}, timeout=5).json() == {
        "error": "bad-date"
    }
    refused = s.post(url, data={**base, "g-recaptcha-response": token_for(sb, url, "daily-report")}, timeout=5)
    assert refused.json() == {"error": "bad-field-_token"}  # the hidden field must come back
    answer = s.post(
        url, data={"_token": token, "market": "SE-02", "g-recaptcha-response": token_for(sb, url, "daily-report")}
    )
    assert answer.json() == {"records": report_records(default_day(), "SE-02")}  # no date posted: the page's own
