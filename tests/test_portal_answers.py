"""portal.answers: JSON records, a JSON list, CSV read exactly, an HTML page as transient."""

import json

import pytest
import requests

from portal_export.errors import PermanentError, TransientError
from portal_export.portal import read_answer
from sandbox import expected_csv_records
from sandbox.portal_data import csv_body

WHAT = "the form post of day 2026-09-01 region north"


def answer(body, content_type="", **headers):
    resp = requests.Response()
    resp.status_code = 200
    resp._content = body.encode() if isinstance(body, str) else body
    if content_type:
        resp.headers["Content-Type"] = content_type
    resp.headers.update(headers)
    resp.encoding = requests.utils.get_encoding_from_headers(resp.headers)
    return resp


TRICKY = (
    'id,name,amount,note,empty\r\n1,"Acme, Inc.",0012,"said ""hi""",\r\n'
    '2,Zürich Ltd,"1,5","two\nlines",\r\n3,北方贸易,NA,,x\r\n'
)
TRICKY_RECORDS = [
    {"id": "1", "name": "Acme, Inc.", "amount": "0012", "note": 'said "hi"', "empty": ""},
    {"id": "2", "name": "Zürich Ltd", "amount": "1,5", "note": "two\nlines", "empty": ""},
    {"id": "3", "name": "北方贸易", "amount": "NA", "note": "", "empty": "x"},
]


@pytest.mark.parametrize(
    "content_type, headers",
    [
        ("text/csv; charset=utf-8", {}),
        ("text/csv", {}),  # no charset: UTF-8, not requests' ISO-8859-1 default
        ("application/octet-stream", {"Content-Disposition": 'attachment; filename="export 2026-09-01.CSV"'}),
        ("application/octet-stream", {"Content-Disposition": "attachment; filename*=UTF-8''r%C3%A9gion.csv"}),
    ],
    ids=["text-csv", "text-csv-no-charset", "attachment", "attachment-rfc5987"],
)
def test_csv_is_read_exactly_as_strings_in_file_order(content_type, headers):
    assert read_answer(answer(TRICKY, content_type, **headers), WHAT) == TRICKY_RECORDS


def test_csv_with_a_bom_and_blank_lines_and_the_sandbox_s_file():
    assert read_answer(answer("\ufeffa,b\r\n\r\n1,\r\n", "text/csv"), WHAT) == [{"a": "1", "b": ""}]
    rows = expected_csv_records("2026-09-01", "north")
    assert read_answer(answer(csv_body(rows), "text/csv; charset=utf-8"), WHAT) == rows


@pytest.mark.parametrize(
    "body, why",
    [
        ("", "without a header"),
        ("a,a\r\n1,2\r\n", "repeated"),
        ("a,b\r\n1\r\n", "line 2 has 1 fields"),
        ('a\r\n"x\r\n', "malformed"),
    ],
)
def test_malformed_csv_is_permanent(body, why):
    with pytest.raises(PermanentError) as info:
        read_answer(answer(body, "text/csv"), WHAT)
    assert info.value.code == "PORTAL_BAD_ANSWER" and why in str(info.value)


def test_json_records_and_a_json_list_keep_types_and_order():
    records = [{"z": 1.0, "a": None, "n": {"y": [1, 2.5]}}, {"b": True}]
    for body in ({"records": records}, records):
        got = read_answer(answer(json.dumps(body), "application/json"), WHAT)
        assert json.dumps(got) == json.dumps(records)
    assert read_answer(answer("[]", "application/json"), WHAT) == []


@pytest.mark.parametrize(
    "body, content_type",
    [
        ("<!DOCTYPE html><html><head><title>Scheduled maintenance</title></head></html>", "text/html"),
        ("<html><head><title>Scheduled maintenance</title>", ""),
        ("<html><head><title>Scheduled maintenance</title>", "application/octet-stream"),
    ],
)
def test_an_html_page_is_transient_with_its_title(body, content_type):
    with pytest.raises(TransientError) as info:
        read_answer(answer(body, content_type), WHAT)
    assert info.value.code == "PORTAL_HTML_ANSWER"
    assert str(info.value) == f"PORTAL_HTML_ANSWER: {WHAT} answered an HTML page titled 'Scheduled maintenance'"


@pytest.mark.parametrize("body", ['{"rows": []}', '{"records": {}}', "[1, 2]", "done", '"records"'])
def test_anything_else_is_permanent(body):
    with pytest.raises(PermanentError) as info:
        read_answer(answer(body, "text/plain"), WHAT)
    assert info.value.code == "PORTAL_BAD_ANSWER"
