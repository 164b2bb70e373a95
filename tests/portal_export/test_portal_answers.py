"""portal.answers: JSON records, a JSON list, CSV read exactly, an HTML page as transient."""

import csv
import io
import json

import pytest
import requests

from portal_export.errors import PermanentError, TransientError
from portal_export.portal import answers, read_answer, streams
from sandbox import expected_csv_records, expected_records
from sandbox.portal_data import csv_body

WHAT = "the form post of day 2026-09-01 region north"


def read(resp):
    """The records of an answer, read to its end, as objects."""
    return [json.loads(line) for line in read_answer(resp, WHAT)]


def answer(body, content_type="", **headers):
    resp = requests.Response()
    resp.status_code = 200
    resp.raw = io.BytesIO(body.encode() if isinstance(body, str) else body)  # read as a stream
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
    assert read(answer(TRICKY, content_type, **headers)) == TRICKY_RECORDS


def test_csv_with_a_bom_and_blank_lines_and_the_sandbox_s_file():
    assert read(answer("\ufeffa,b\r\n\r\n1,\r\n", "text/csv")) == [{"a": "1", "b": ""}]
    rows = expected_csv_records("2026-09-01", "north")
    assert read(answer(csv_body(rows), "text/csv; charset=utf-8")) == rows


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
        read(answer(body, "text/csv"))
    assert info.value.code == "PORTAL_BAD_ANSWER" and why in str(info.value)


def test_json_records_and_a_json_list_keep_types_and_order():
    records = [{"z": 1.0, "a": None, "n": {"y": [1, 2.5]}}, {"b": True}]
    for body in ({"records": records}, records):
        got = read(answer(json.dumps(body), "application/json"))
        assert json.dumps(got) == json.dumps(records)
    assert read(answer("[]", "application/json")) == []


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
        read(answer(body, content_type))
    assert info.value.code == "PORTAL_HTML_ANSWER"
    assert str(info.value) == f"PORTAL_HTML_ANSWER: {WHAT} answered an HTML page titled 'Scheduled maintenance'"


@pytest.mark.parametrize("body", ['{"rows": []}', '{"records": {}}', "[1, 2]", "done", '"records"'])
def test_anything_else_is_permanent(body):
    with pytest.raises(PermanentError) as info:
        read(answer(body, "text/plain"))
    assert info.value.code == "PORTAL_BAD_ANSWER"


# What the export wrote before answers streamed: the whole document through json.loads, each
# record through json.dumps. Streaming must give the same bytes.
NUMBERS = (
    '{"meta": {"records": [1], "n": [1, {"a": []}]}, "count": 123456789, "records": [\n'
    '{"int": 12345678901234567890123456789, "neg": -9223372036854775809, "f": 0.1, "g": 1e5, "h": -0.0,'
    ' "big": 1e400, "tiny": 5e-324, "e": 1.7976931348623157e308, "nan": NaN, "inf": -Infinity, "d": 2.50},\n'
    '{"s": "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\n", "u": "Zürich 北方贸易 😀", "lone": "\\udc00", "k": {"k": 1, "k": 2}},'
    ' {}, {"t": true, "f": false, "n": null, "l": [1.0, 2, [3.25e-3]]}], "after": {"x": "y"}}  \n'
)


def before(body):
    doc = json.loads(body)
    records = doc["records"] if isinstance(doc, dict) else doc
    return [json.dumps(r, ensure_ascii=False) for r in records]


def csv_before(text):
    rows = [row for row in csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")) if row]
    return [json.dumps(dict(zip(rows[0], row, strict=True)), ensure_ascii=False) for row in rows[1:]]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_streamed_records_are_the_bytes_json_loads_and_dumps_gave(monkeypatch, chunk):
    """Every chunk boundary: inside numbers, escapes, multi-byte characters and literals."""
    monkeypatch.setattr(streams, "CHUNK", chunk)
    monkeypatch.setattr(answers, "CHUNK", max(chunk, 8))
    sandbox = expected_records("2026-09-01", "north", (40, 40))
    cases = [
        (NUMBERS, "application/json"),
        (json.dumps({"records": sandbox}, ensure_ascii=False), "application/json"),
        (json.dumps(sandbox), "application/json"),  # a top-level list, \u escapes
        ("  [ ]  ", "application/json"),
        ('{"records": []}', "application/json; charset=utf-8"),
    ]
    for body, content_type in cases:
        assert list(read_answer(answer(body.encode(), content_type), WHAT)) == before(body)
    text = csv_body(expected_csv_records("2026-09-01", "north", (40, 40)))
    for body in (text, TRICKY, "\ufeff" + TRICKY):
        assert list(read_answer(answer(body.encode(), "text/csv"), WHAT)) == csv_before(body)


@pytest.mark.parametrize(
    "body, why",
    [
        ('{"records": [{"a": 1}, {"b": 2]}', "malformed JSON"),
        ('{"records": [{"a": 1}, 5]}', "without a list of record objects"),
        ('{"records": [{"a": 1}]} {"x": 1}', "data after the document"),
        ('{"records": [{"a": 1}], "records": []}', "two lists of records"),
        ('{"records": [{"a": 1}', "expected one of"),
        ('{"records": [{"a": 1}, {"b": "' + "x" * 200 + '"}]}', "a value of over 100 characters"),
    ],
)
def test_json_that_goes_wrong_after_its_start_is_permanent_where_it_goes_wrong(monkeypatch, body, why):
    monkeypatch.setattr(streams, "CHUNK", 16)
    monkeypatch.setattr(streams, "MAX_VALUE_CHARS", 100)
    lines = read_answer(answer(body, "application/json"), WHAT)
    assert next(lines) == '{"a": 1}'  # the first record came through before the fault was seen
    with pytest.raises(PermanentError) as info:
        list(lines)
    assert info.value.code == "PORTAL_BAD_ANSWER" and why in str(info.value)
