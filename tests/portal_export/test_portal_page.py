"""portal.page: the widget, its form and the frames, read from saved HTML alone (no network).

tests/portal_export/pages/ holds real-world-shaped pages (ASP.NET WebForms, several forms, nested forms, a widget
outside any form, a rendered anchor iframe, an explicit grecaptcha.render, frames, a login page);
the sandbox's own variant pages are checked too, as the sandbox serves them.
"""

from pathlib import Path

import pytest

from portal_export.portal import parse_page
from portal_export.portal.page import looks_like_html, title_of
from sandbox import VARIANTS, sitekey_for
from sandbox.portal_pages import ACTION_FIELDS, export_form, frame_page, login_page

PAGES = Path(__file__).parent / "pages"
URL = "https://reports.partner.example/export?day=2026-09-01&region=north"


def saved(name, url=URL):
    return parse_page((PAGES / name).read_text(), url)


def fields(form):
    return [(f.name, f.value) for f in form.fields]


def test_aspnet_page_uppercase_entities_every_field_kind_and_a_relative_action():
    page = saved("aspnet_webforms.html")
    assert page.title == "Partner Reports – Export"
    assert page.widget.sitekey == "6LeEnterpriseKey-aspnet"
    assert (page.widget.invisible, page.widget.enterprise, page.widget.data_s) == (True, True, None)
    assert page.widget.solve_params() == {"googlekey": "6LeEnterpriseKey-aspnet", "invisible": "1", "enterprise": "1"}
    form = page.form
    assert (form.method, form.action) == ("POST", "https://reports.partner.example/Export.aspx?mode=daily&lang=de")
    assert fields(form) == [
        ("__VIEWSTATE", "/wEPDwUKMTY1NDU2MTA1MmRk+a/b=="),
        ("__VIEWSTATEGENERATOR", "CA0B0334"),
        ("__EVENTVALIDATION", "/wEdAAQ&x<y>\"z\"'q'"),  # entities unescaped once, exactly
        ("ctl00$Main$txtDay", "2026-09-01"),
        ("ctl00$Main$ddlRegion", "south"),  # the selected option
        ("ctl00$Main$ddlFormat", "CSV"),  # none selected: the first, its text as value
        ("ctl00$Main$lstCols", "a"),  # a multiple select sends every selected option
        ("ctl00$Main$lstCols", "c"),
        ("ctl00$Main$txtNote", "Fish & chips <3"),  # the newline after <textarea> dropped, as browsers do
        ("ctl00$Main$chkAll", "on"),  # checked, without value
        ("ctl00$Main$rbl", "2"),  # the checked radio only
    ]  # unchecked, disabled, file and submit inputs are not sent by a scripted submit
    assert {f.name for f in form.fields if f.hidden} == {"__VIEWSTATE", "__VIEWSTATEGENERATOR", "__EVENTVALIDATION"}


def test_several_forms_the_widget_s_own_with_base_href_data_s_and_a_form_attribute():
    page = saved("several_forms.html")
    assert page.widget.sitekey == "6Le-several-forms" and page.widget.data_s == "S-value/+="
    assert page.widget.solve_params()["data-s"] == "S-value/+="
    assert page.form.action == "https://reports.partner.example/app/exports/run"  # against <base href>
    assert fields(page.form) == [("_token", "tok&en"), ("outside", "owned-by-form-attribute")]
    assert len(page.forms) == 4 and page.forms[0].method == "GET"
    assert page.login_form is page.forms[1]


def test_a_nested_form_is_ignored_and_its_end_tag_closes_the_outer_one_as_in_browsers():
    page = saved("nested_forms.html")
    assert page.widget.sitekey == "6Le-nested"
    assert page.form.action == "https://reports.partner.example/outer"
    assert fields(page.form) == [("outer_token", "o1"), ("inner_token", "i1")]
    assert len(page.forms) == 1


def test_a_widget_outside_any_form_has_no_form():
    page = saved("widget_outside_form.html")
    assert page.widget.sitekey == "6Le-outside" and page.form is None
    assert len(page.forms) == 1


def test_the_anchor_iframe_gives_the_sitekey_and_its_size():
    page = saved("anchor_iframe.html")
    assert page.widget.sitekey == "6Le-anchor-key"
    assert page.widget.invisible and not page.widget.enterprise
    assert page.form.action == "https://reports.partner.example/export"
    # the rendered widget's own textarea is a field; the export fills it rather than adding another
    assert fields(page.form) == [("day", "2026-09-01"), ("g-recaptcha-response", "")]
    assert page.frames == ()  # reCAPTCHA's own frames are no portal frames


def test_an_inline_grecaptcha_render_call_gives_the_sitekey_and_the_form_of_its_container():
    page = saved("render_call.html")
    assert page.widget.sitekey == "6Le-render-key" and page.widget.invisible
    assert page.form.action == URL  # no action: the page's own URL
    assert fields(page.form) == [("csrf", "cA")]


def test_frames_are_absolute_and_recaptcha_frames_left_out():
    page = saved("frameset.html")
    assert page.widget is None
    assert page.frames == (
        "https://www.youtube-nocookie.com/embed/abc",
        "https://reports.partner.example/export/form?day=2026-09-01&region=north",
    )


def test_the_login_form_is_the_one_with_a_password_input():
    page = saved("login.html", "https://reports.partner.example/login")
    form = page.login_form
    assert form.action == "https://reports.partner.example/session"
    assert [(f.name, f.value, f.kind) for f in form.fields] == [
        ("csrfmiddlewaretoken", "abc&123", "hidden"),
        ("login", "", ""),
        ("password", "", "password"),
    ]


@pytest.mark.parametrize("html", ["", "not html at all", "<p>no widget</p>", '<div data-sitekey=""></div>'])
def test_no_widget(html):
    assert parse_page(html, URL).widget is None


def test_titles_and_html_detection():
    assert title_of("<html><head><TITLE>  Down \n for  maintenance </TITLE></head></html>") == "Down for maintenance"
    assert looks_like_html("\n <!DOCTYPE html><html>") and looks_like_html("<html><body>x")
    assert not looks_like_html('{"records": []}') and not looks_like_html("a,b\n1,2")


# ------------------------------------------------------------------ the sandbox's variant pages, as served


def sandbox_page(variants, hidden=None, data_s=None):
    return parse_page(
        export_form("2026-09-01", "north", frozenset(variants), sitekey_for("north"), hidden or {}, data_s), URL
    )


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ("frame", "login")])
def test_every_sandbox_variant_page_gives_its_sitekey_and_a_form(variant):
    page = sandbox_page({variant}, data_s="the-s" if variant == "data-s" else None)
    assert page.widget.sitekey == sitekey_for("north")
    assert page.form is not None
    assert page.widget.invisible == (variant == "invisible")
    assert page.widget.enterprise == (variant == "enterprise")
    assert page.widget.data_s == ("the-s" if variant == "data-s" else None)


@pytest.mark.parametrize("how", ["anchor", "render", "div"])
def test_sandbox_invisible_enterprise_in_each_widget_form(how):
    page = sandbox_page({"invisible", "enterprise"} | ({how} if how != "div" else set()))
    assert (page.widget.invisible, page.widget.enterprise) == (True, True)
    assert page.widget.kind == "enterprise invisible"


def test_sandbox_action_page_posts_its_view_state_and_visible_fields():
    page = sandbox_page({"action", "csrf"}, hidden={"csrf_token": "c", "__VIEWSTATE": "v+/=", "__EVENTVALIDATION": "e"})
    assert page.form.action == "https://reports.partner.example/reports/run" and page.form.method == "POST"
    sent = dict(fields(page.form))
    assert sent == {"csrf_token": "c", "__VIEWSTATE": "v+/=", "__EVENTVALIDATION": "e"} | {
        k: v for k, v in ACTION_FIELDS.items() if v is not None
    }
    assert "day" not in sent and "region" not in sent  # the export adds them


def test_sandbox_get_form_and_frame_and_login_pages():
    assert sandbox_page({"get"}).form.method == "GET"
    frames = parse_page(frame_page("2026-09-01", "north"), URL).frames
    assert frames[1] == "https://reports.partner.example/export/form?day=2026-09-01&region=north"
    login = parse_page(login_page("t&1", failed=False), "https://reports.partner.example/login").login_form
    assert [f.name for f in login.fields][:4] == ["authenticity_token", "next", "session[email]", "session[password]"]
