"""Real portals over real HTTP: every sandbox variant alone and all together, maintenance pages, the
login (and a wrong password), region names beyond the four, CSV read exactly.

The sandbox checks what a real site would: the CSRF token and view state come back unchanged, the
form goes to its action, the token was solved for the page's widget kind and data-s, the session
logged in. So a variant the client gets wrong shows as a refused token or a failed region here.
"""

import datetime
import json

import luigi
import pytest

from portal_export.breaker import KeyBreaker
from portal_export.store import LocalStore
from sandbox import SANDBOX_PASSWORD, SANDBOX_USER, VARIANTS
from tasks import DayExport

DAY = datetime.date(2026, 9, 1)
WRONG_PASSWORD = "Wr0ng-Passw0rd-canary-7d1e"
# what each widget variant must make the client send to CaptchaAI
KIND = {
    "invisible": {"invisible": True, "enterprise": False},
    "enterprise": {"invisible": False, "enterprise": True},
}
# Every variant at once where they combine (anchor and render replace the data-sitekey div, so
# data-s, which rides on that div, goes with neither): five regions, one with everything.
TOGETHER = {
    "everything": {
        "login",
        "frame",
        "csrf",
        "action",
        "invisible",
        "enterprise",
        "data-s",
        "csv-attachment",
        "maintenance",
    },
    "anchor-get": {"anchor", "invisible", "get", "csv", "csrf"},
    "render_list": {"render", "enterprise", "list", "frame"},
    "Nord-2": {"data-s", "action", "csv"},
    "plain": set(),
}


def build(*tasks):
    return luigi.build(list(tasks), local_scheduler=True, workers=1, detailed_summary=True)


def lines_of(data_dir, d=DAY):
    return (data_dir / f"portal_records_{d}.jsonl").read_text().splitlines()


def expected_lines(sb, regions, d=DAY):
    return [json.dumps(r, ensure_ascii=False) for region in regions for r in sb.expected_records(d, region)]


def health(data_dir, d=DAY):
    return json.loads((data_dir / f"portal_records_{d}.health.json").read_text())


def captchaai_requests(sb):
    requests = sb.stats()["requests"]
    return requests.get("in.php", 0) + requests.get("res.php", 0)


@pytest.fixture
def logged_in(monkeypatch):
    monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
    monkeypatch.setenv("PORTAL_PASSWORD", SANDBOX_PASSWORD)


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_alone_delivers_every_record(variant, live, fast_cfg, data_dir, monkeypatch):
    region = variant  # a region named like its variant: "data-s" and "csv-attachment" are names too
    live.configure(variants={region: {variant}})
    fast_cfg({"portal": {"regions": region}})
    if variant == "login":
        monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
        monkeypatch.setenv("PORTAL_PASSWORD", SANDBOX_PASSWORD)

    result = build(DayExport(date=DAY))

    assert result.status == luigi.execution_summary.LuigiStatusCode.SUCCESS, result.summary_text
    assert lines_of(data_dir) == expected_lines(live, [region])
    stats = live.stats()
    assert stats["tokens"]["accepted"] == 1 and stats["tokens"]["refused"] == {}
    (task,) = [t for t in live.tasks() if t["token_accepted"]]
    assert {k: task[k] for k in ("invisible", "enterprise")} == KIND.get(
        variant, {"invisible": False, "enterprise": False}
    )
    assert (task["data_s"] is not None) == (variant == "data-s")
    facts = health(data_dir)["regions"][region]
    if variant == "maintenance":  # two maintenance pages, then the records: one run
        assert facts["transient_errors"] == ["PORTAL_HTML_ANSWER"] * 2 and facts["attempts"] == 3
    else:
        assert facts["transient_errors"] == [] and facts["attempts"] == 1
    if variant == "login":
        assert stats["logins"] == {"ok": 1}
    if variant.startswith("csv"):  # the strings of the file, tricky ones among them
        records = [json.loads(line) for line in lines_of(data_dir)]
        assert all(isinstance(v, str) for r in records for v in r.values())
        values = [v for r in records for v in r.values()]
        assert "" in values and any("," in v for v in values) and any('"' in v for v in values)
        assert any("\n" in v for v in values) and any(not v.isascii() for v in values) and "NA" in values


@pytest.mark.parametrize("variant", ["invisible", "enterprise", "data-s"])
def test_a_token_solved_for_the_wrong_kind_is_refused(variant, live, fast_cfg, data_dir, monkeypatch):
    """The sandbox refuses what a real site refuses: the check the variant tests above rely on."""
    import portal_export.portal.page as page

    live.configure(variants={"north": {variant}})
    fast_cfg({"portal": {"regions": "north", "attempts": 2}})
    monkeypatch.setattr(page.Widget, "solve_params", lambda self: {"googlekey": self.sitekey})  # kind dropped
    result = build(DayExport(date=DAY))
    assert result.status != luigi.execution_summary.LuigiStatusCode.SUCCESS
    reason = "wrong-data-s" if variant == "data-s" else "wrong-widget-kind"
    assert live.stats()["tokens"]["refused"] == {reason: 2}


@pytest.mark.unmeasured
def test_every_variant_together_on_one_day_through_the_cli(live, fast_cfg, cli, data_dir, logged_in):
    live.configure(variants=TOGETHER)
    fast_cfg({"portal": {"regions": ",".join(TOGETHER)}})

    run = cli("export", DAY)

    assert run.code == 0, run
    assert lines_of(data_dir) == expected_lines(live, TOGETHER)
    stats = live.stats()
    assert stats["tokens"]["accepted"] == 5 and stats["tokens"]["refused"] == {}
    assert stats["maintenance_pages"] == 2
    assert stats["logins"] == {"ok": 1 + 5 + 2}  # the run's check, each region, the retried region's 2 more pages
    tasks = {t["pageurl"].split("region=")[1]: t for t in live.tasks() if t["token_accepted"]}
    assert tasks["everything"]["pageurl"].startswith(f"{live.portal_url}/export/form?")  # the frame's URL
    assert (tasks["everything"]["invisible"], tasks["everything"]["enterprise"]) == (True, True)
    assert tasks["everything"]["data_s"] and tasks["Nord-2"]["data_s"] and not tasks["plain"]["data_s"]
    assert tasks["anchor-get"]["invisible"] and tasks["render_list"]["enterprise"]
    assert health(data_dir)["regions"]["everything"]["transient_errors"] == ["PORTAL_HTML_ANSWER"] * 2


@pytest.mark.unmeasured
def test_five_regions_with_dash_and_underscore_in_names(live, fast_cfg, cli, data_dir):
    regions = ["north", "south-east", "west_2", "Zone-9_b", "e"]
    fast_cfg({"portal": {"regions": ",".join(regions)}})
    run = cli("export", DAY)
    assert run.code == 0, run
    assert lines_of(data_dir) == expected_lines(live, regions)
    assert list(health(data_dir)["regions"]) == regions
    assert sorted(p.name for p in (data_dir / "regions" / str(DAY)).glob("*.jsonl")) == sorted(
        f"{r}.jsonl" for r in regions
    )


def leaked(tmp_path, secret):
    return [str(p) for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_wrong_password_fails_at_once_solves_nothing_and_trips_the_login_breaker(
    live, fast_cfg, cli, data_dir, tmp_path, monkeypatch
):
    live.configure(variants={"*": {"login"}})
    monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
    monkeypatch.setenv("PORTAL_PASSWORD", WRONG_PASSWORD)

    run = cli("export", DAY)

    assert run.code != 0, run
    assert "PORTAL_LOGIN_REFUSED" in run.err and SANDBOX_USER in run.err
    assert captchaai_requests(live) == 0 and live.tasks() == []
    assert live.stats()["logins"] == {"refused-credentials": 1}
    (breaker,) = (data_dir / "_state").glob("breaker-*.json")
    assert json.loads(breaker.read_text())["code"] == "PORTAL_LOGIN_REFUSED"

    # a 30-day backfill with the same password: not one more login, not one CaptchaAI request
    again = cli("backfill", "2026-08-01", "2026-08-31")
    assert again.code != 0 and "PORTAL_LOGIN_REFUSED" in again.err and "make clear-breaker" in again.err
    assert live.stats()["logins"] == {"refused-credentials": 1} and captchaai_requests(live) == 0

    assert WRONG_PASSWORD not in run.out + run.err + again.out + again.err
    assert leaked(tmp_path, WRONG_PASSWORD) == []

    # the right password is not blocked by the wrong one's breaker; clear-breaker removes it
    monkeypatch.setenv("PORTAL_PASSWORD", SANDBOX_PASSWORD)
    fast_cfg({"portal": {"regions": "north"}})
    assert cli("export", DAY).code == 0
    assert "PORTAL_LOGIN_REFUSED" in cli("clear-breaker").err
    assert list((data_dir / "_state").glob("breaker-*.json")) == []


def test_a_login_refused_inside_the_tasks_stops_every_region_after_the_first(live, data_dir, monkeypatch):
    """Without the CLI's check (luigi run directly): the first region's refusal trips the breaker,
    the others fail on it without a login post; nothing is solved."""
    live.configure(variants={"*": {"login"}})
    monkeypatch.setenv("PORTAL_USERNAME", SANDBOX_USER)
    monkeypatch.setenv("PORTAL_PASSWORD", WRONG_PASSWORD)
    result = build(DayExport(date=DAY))
    assert result.status != luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert live.stats()["logins"] == {"refused-credentials": 1}
    assert captchaai_requests(live) == 0
    assert not list((data_dir / "regions").glob("*/*.jsonl"))
    assert leaked(data_dir, WRONG_PASSWORD) == []


def test_without_credentials_a_login_portal_is_a_page_without_sitekey(live, fast_cfg, data_dir):
    live.configure(variants={"north": {"login"}})
    fast_cfg({"portal": {"regions": "north"}})
    result = build(DayExport(date=DAY))
    assert result.status != luigi.execution_summary.LuigiStatusCode.SUCCESS
    assert captchaai_requests(live) == 0


def test_the_login_breaker_is_named_by_url_user_and_password_never_holding_them(tmp_path):
    a = KeyBreaker(LocalStore(tmp_path), f"login\0http://p\0{SANDBOX_USER}\0{WRONG_PASSWORD}")
    b = KeyBreaker(LocalStore(tmp_path), f"login\0http://p\0{SANDBOX_USER}\0{SANDBOX_PASSWORD}")
    assert a.key != b.key and a.key.startswith("_state/breaker-")
