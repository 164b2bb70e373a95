"""The portal's shape (portal_export/portal/shape.py): templates parsed once, `[portal]`'s entries read,
the export form filled (form_fill.py) and the records checked as they stream (record_checks.py)."""

import datetime
import itertools
import json

import pytest

from portal_export.errors import PermanentError
from portal_export.portal import PortalShape, ShapeError, parse_page
from portal_export.portal.form_fill import SHOWN_OPTIONS, fill
from portal_export.portal.page import Select
from portal_export.portal.record_checks import checked
from portal_export.portal.shape import DEFAULT_PAGE, Template, split_entries
from sandbox import REGIONS

DAY = datetime.date(2026, 9, 1)


def render(text, region="north"):
    return Template.parse(text, "[portal] test").render(DAY, region)


# ------------------------------------------------------------------------------------------- templates


@pytest.mark.parametrize(
    "text, written",
    [
        ("{day}", "2026-09-01"),
        ("{day:DD.MM.YYYY}", "01.09.2026"),
        ("{day:MM/DD/YYYY}", "09/01/2026"),
        ("{day:YYYYMMDD}", "20260901"),
        ("{day:DD MM, YYYY!}", "01 09, 2026!"),
        ("{ day }", "2026-09-01"),
        ("{day :DD.MM.YYYY}", "01.09.2026"),
        ("{region}", "north"),
        ("from {day:YYYY-MM}-01 to {day}", "from 2026-09-01 to 2026-09-01"),
        ("{{literal}} {region}", "{literal} north"),
        ("no placeholder", "no placeholder"),
        ("", ""),
    ],
)
def test_a_template_writes_the_day_and_the_region(text, written):
    assert render(text) == written


def test_a_day_pattern_pads_its_parts():
    template = Template.parse("{day:DD.MM.YYYY}", "x")
    assert template.render(datetime.date(987, 1, 2), "r") == "02.01.0987"


@pytest.mark.parametrize(
    "text, said",
    [
        ("{dya}", "unknown placeholder {dya}"),
        ("{region:upper}", "unknown placeholder {region:upper}"),
        ("{date:DD.MM.YYYY}", "unknown placeholder {date:DD.MM.YYYY}"),
        ("{day:%d.%m.%Y}", "holds %"),
        ("{day:}", "has no pattern"),
        ("{day:dd.mm.yyyy}", "holds no YYYY, MM or DD"),
        ("{day:DD.MMM.YYYY}", "holds 'M'"),
        ("{day:YY-MM-DD}", "holds 'YY'"),
        ("/export?day={day", "a lone '{'"),
        ("/export}", "a lone '}'"),
    ],
)
def test_a_template_that_cannot_work_is_refused_naming_where(text, said):
    with pytest.raises(ShapeError) as err:
        Template.parse(text, "[portal] export_page")
    assert said in str(err.value) and str(err.value).startswith("[portal] export_page: ")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------ the [portal] keys


def shape(**keys):
    return PortalShape.from_settings("https://portal.test/", REGIONS, **keys)


def test_the_defaults_are_the_simplest_portal():
    portal = shape()
    assert portal == PortalShape("https://portal.test")
    assert portal.export_page.text == DEFAULT_PAGE
    assert portal.page_url(DAY, "north") == "https://portal.test/export?day=2026-09-01&region=north"
    assert portal.field_values(DAY, "north") == [] and portal.wanted(DAY, "north") == []
    assert portal.value_of("south-east_2") == "south-east_2"


def test_every_substitution_in_the_page_is_url_encoded_and_literal_text_is_not():
    portal = shape(export_page="/r/{region}/daily?d={day:DD/MM/YYYY}&x=a%20b", region_values="north=NE 01&x/y")
    assert portal.page_url(DAY, "north") == "https://portal.test/r/NE%2001%26x%2Fy/daily?d=01%2F09%2F2026&x=a%20b"


def test_the_keys_give_fields_values_and_checks_for_each_region():
    portal = shape(
        export_page=" /reports/daily ",
        export_fields="report_date={day:DD.MM.YYYY}, market={region},\n  note = from {day} ",
        region_values="north=NE-01,south = SE-03",
        record_checks="date={day:DD.MM.YYYY},market={region}",
    )
    assert portal.page_url(DAY, "north") == "https://portal.test/reports/daily"
    assert portal.field_values(DAY, "north") == [
        ("report_date", "01.09.2026"),
        ("market", "NE-01"),
        ("note", "from 2026-09-01"),
    ]
    assert portal.field_values(DAY, "east")[1] == ("market", "east")  # no value given: the region's name
    assert portal.wanted(DAY, "south") == [("date", "01.09.2026"), ("market", "SE-03")]


def test_commas_inside_a_placeholder_do_not_split_entries():
    assert split_entries("a={day:DD,MM,YYYY}, b=x,,") == ["a={day:DD,MM,YYYY}", "b=x"]
    assert shape(export_fields="when={day:DD, MM YYYY}").field_values(DAY, "north") == [("when", "01, 09 2026")]


@pytest.mark.parametrize(
    "keys, said",
    [
        (
            {"region_values": "north=NE-01,nowhere=X"},
            "[portal] region_values: 'nowhere' is not one of [portal] regions",
        ),
        ({"region_values": "north"}, "[portal] region_values: 'north' is no NAME=VALUE entry"),
        ({"region_values": "north= ,south=SE"}, "[portal] region_values: 'north' has no value"),
        ({"export_fields": "=x"}, "[portal] export_fields: '=x' is no NAME=VALUE entry"),
        ({"export_fields": "a=1, a=2"}, "[portal] export_fields: 'a' is given twice"),
        ({"export_fields": "market={markt}"}, "[portal] export_fields market: unknown placeholder {markt}"),
        ({"record_checks": "date={day:%d.%m.%Y}"}, "[portal] record_checks date: {day:%d.%m.%Y} holds %"),
        ({"export_page": "/export?day={day}&region={regoin}"}, "[portal] export_page: unknown placeholder {regoin}"),
    ],
)
def test_a_key_that_cannot_work_is_refused_in_one_line(keys, said):
    with pytest.raises(ShapeError) as err:
        shape(**keys)
    assert said in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------- form filling

PAGE = """<html><body><form method="post" action="/reports/daily">
<input type="hidden" name="_token" value="t0k">
<input type="text" name="report_date" value="05.12.2026">
<select name="market"><option value="NE-01">North-East</option><option value="SE-03" selected>  South
 East </option><option>Central</option></select>
<select name="empty"></select>
<input type="checkbox" name="tag" value="a" checked><input type="checkbox" name="tag" value="b" checked>
<div class="g-recaptcha" data-sitekey="k"></div></form></body></html>"""


@pytest.fixture
def form():
    return parse_page(PAGE, "https://portal.test/reports/daily").form


def form_fill(form, values):
    return fill([(f.name, f.value) for f in form.fields], form.selects, values)


def test_the_page_tells_each_select_its_values_and_labels(form):
    assert form.selects == (
        Select("market", (("NE-01", "North-East"), ("SE-03", "South East"), ("Central", "Central"))),
        Select("empty", ()),
    )
    assert ("market", "SE-03") in [(f.name, f.value) for f in form.fields]  # what a browser sends, as before


def test_named_fields_are_set_in_place_the_rest_kept_and_the_unknown_added(form):
    filled = form_fill(form, [("report_date", "01.09.2026"), ("market", "NE-01"), ("tag", "z"), ("extra", "1")])
    assert filled.fields == [
        ("_token", "t0k"),
        ("report_date", "01.09.2026"),
        ("market", "NE-01"),
        ("tag", "z"),  # one value for the name: the second checked box dropped
        ("extra", "1"),
    ]
    assert filled.added == {"extra"} and filled.problems == ()


def test_a_select_takes_an_option_label_for_its_value(form):
    filled = form_fill(form, [("market", "South  East"), ("report_date", "x")])
    assert ("market", "SE-03") in filled.fields and filled.problems == ()
    assert ("market", "Central") in form_fill(form, [("market", "Central")]).fields  # an option without value=


def test_a_value_no_select_offers_is_a_problem_naming_field_value_and_offers(form):
    filled = form_fill(form, [("market", "XX-99")])
    (problem,) = filled.problems
    assert problem == (
        "field 'market' is a <select> without the value 'XX-99'; it offers "
        "'NE-01' (North-East), 'SE-03' (South East), 'Central'"
    )
    (empty,) = form_fill(form, [("empty", "x")]).problems
    assert empty.endswith("it offers none")


def test_a_long_select_lists_its_first_options_and_counts_the_rest():
    select = Select("m", tuple((f"M-{i}", f"Market {i}") for i in range(SHOWN_OPTIONS + 12)))
    (problem,) = fill([("m", "M-0")], [select], [("m", "nope")]).problems
    assert f"'M-{SHOWN_OPTIONS - 1}' (Market {SHOWN_OPTIONS - 1}) and 12 more" in problem
    assert f"'M-{SHOWN_OPTIONS}'" not in problem


# ------------------------------------------------------------------------------------------ the checks


def lines(*records):
    return [json.dumps(r, ensure_ascii=False) for r in records]


WANTED = [("date", "01.09.2026"), ("market", "NE-01")]


def test_records_carrying_the_wanted_values_pass_unchanged():
    given = lines({"date": "01.09.2026", "market": "NE-01", "n": 1}, {"market": "NE-01", "date": "01.09.2026"})
    assert list(checked(iter(given), WANTED, "the post")) == given


def test_values_that_are_no_string_are_compared_as_their_json():
    given = lines({"n": 5, "ok": True, "x": None, "f": 1.5, "s": "Zürich"})
    wanted = [("n", "5"), ("ok", "true"), ("x", "null"), ("f", "1.5"), ("s", "Zürich")]
    assert list(checked(iter(given), wanted, "the post")) == given
    with pytest.raises(PermanentError):
        list(checked(iter(given), [("n", "5.0")], "the post"))


def test_the_first_mismatch_fails_naming_field_wanted_and_found_and_nothing_after_is_read():
    good = lines(*[{"date": "01.09.2026", "market": "NE-01"}] * 3)
    bad = lines({"date": "05.12.2026", "market": "NE-01"})

    def never():
        raise AssertionError("read past the mismatch")
        yield

    stream = checked(itertools.chain(good, bad, never()), WANTED, "the form post of day 2026-09-01 region north")
    assert [next(stream) for _ in good] == good  # handed on as they come, not held
    with pytest.raises(PermanentError) as err:
        next(stream)
    assert err.value.code == "PORTAL_RECORDS_MISMATCH"
    assert "record 4 of the answer has date='05.12.2026'" in str(err.value)
    assert "record_checks wants date='01.09.2026'" in str(err.value)
    assert str(err.value).startswith("PORTAL_RECORDS_MISMATCH: the form post of day 2026-09-01 region north: ")


def test_a_record_without_the_field_fails():
    with pytest.raises(PermanentError) as err:
        list(checked(iter(lines({"market": "NE-01"})), WANTED, "the post"))
    assert "record 1 of the answer has no such field, [portal] record_checks wants date='01.09.2026'" in str(err.value)


# ------------------------------------------------------------------- docs/portals.md's worked examples


def test_the_date_range_example_sets_both_dates_and_the_region_number():
    page = parse_page(
        '<form method="post" action="/reports/export"><input type="hidden" name="__RequestVerificationToken" '
        'value="v"><input type="date" name="from"> <input type="date" name="to"><select name="regionId">'
        '<option value="1">North</option><option value="2">South</option></select>'
        '<div class="g-recaptcha" data-sitekey="k"></div></form>',
        "https://portal.test/reports/export",
    )
    portal = shape(
        export_page="/reports/export",
        export_fields="from={day}, to={day}, regionId={region}",
        region_values="north=1, south=2, east=3, west=4",
        record_checks="Date={day}",
    )
    filled = form_fill(page.form, portal.field_values(DAY, "south"))
    assert filled.fields == [
        ("__RequestVerificationToken", "v"),
        ("from", "2026-09-01"),
        ("to", "2026-09-01"),
        ("regionId", "2"),
    ]
    assert filled.problems == () and portal.wanted(DAY, "south") == [("Date", "2026-09-01")]


def test_the_mm_dd_yyyy_example_encodes_its_slashes_in_the_url_only():
    portal = shape(
        export_page="/export/run?date={day:MM/DD/YYYY}&site={region}",
        export_fields="reportDate={day:MM/DD/YYYY}, site={region}",
        record_checks="Report Date={day:MM/DD/YYYY}, Site={region}",
    )
    assert portal.page_url(DAY, "north") == "https://portal.test/export/run?date=09%2F01%2F2026&site=north"
    assert portal.field_values(DAY, "north") == [("reportDate", "09/01/2026"), ("site", "north")]
    assert portal.wanted(DAY, "north") == [("Report Date", "09/01/2026"), ("Site", "north")]
