"""Reading the form post's answer: JSON records, a JSON list, or CSV; an HTML page is no answer yet.

CSV is read with the csv module and nothing else: every value stays the exact string of the file
(no number, date or NA guessing), an empty field is "", rows keep the file's order.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import requests

from ..errors import PermanentError, TransientError
from .page import looks_like_html, title_of

Record = dict[str, Any]
HANDLING = (
    'JSON {"records": [...]}, a JSON list of objects, or CSV (Content-Type text/csv, or an attachment '
    "named *.csv: header keys, exact strings); a 200 HTML page is retried from a fresh page"
)


def is_csv(content_type: str, disposition: str) -> bool:
    if content_type.split(";")[0].strip().lower() in ("text/csv", "application/csv"):
        return True
    name = _filename(disposition)
    return name is not None and name.lower().endswith(".csv")


def _filename(disposition: str) -> str | None:
    """The file name of a Content-Disposition header (filename*=UTF-8''... or filename=...)."""
    found: str | None = None
    for part in disposition.split(";"):
        key, _, value = part.strip().partition("=")
        key, value = key.strip().lower(), value.strip().strip('"')
        if key == "filename*":
            return value.split("'", 2)[-1]
        if key == "filename":
            found = value
    return found


def read_csv(text: str, what: str) -> list[Record]:
    rows = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True)
    try:
        header = next(rows, None)
        if not header:
            raise PermanentError("PORTAL_BAD_ANSWER", f"{what} answered CSV without a header row")
        if len(set(header)) != len(header):
            raise PermanentError("PORTAL_BAD_ANSWER", f"{what} answered CSV with repeated header names")
        records = []
        for row in rows:
            if not row:  # a blank line holds no record
                continue
            if len(row) != len(header):
                raise PermanentError(
                    "PORTAL_BAD_ANSWER",
                    f"{what} answered CSV whose line {rows.line_num} has {len(row)} fields, the header {len(header)}",
                )
            records.append(dict(zip(header, row, strict=True)))
    except csv.Error as exc:
        raise PermanentError("PORTAL_BAD_ANSWER", f"{what} answered malformed CSV ({exc})") from None
    return records


def _json_records(body: object) -> list[Record] | None:
    records = body.get("records") if isinstance(body, dict) else body
    if isinstance(records, list) and all(isinstance(r, dict) for r in records):
        return records
    return None


def read_answer(resp: requests.Response, what: str) -> list[Record]:
    """The records of a 2xx answer to the form post, or the error it amounts to."""
    content_type = resp.headers.get("Content-Type", "")
    if is_csv(content_type, resp.headers.get("Content-Disposition", "")):
        # a CSV without a charset is read as UTF-8: requests' ISO-8859-1 default would garble it
        text = resp.text if "charset=" in content_type.lower() else resp.content.decode("utf-8", "replace")
        return read_csv(text, what)
    try:
        body = resp.json()
    except ValueError:
        body = None
    else:
        records = _json_records(body)
        if records is not None:
            return records
        raise PermanentError("PORTAL_BAD_ANSWER", f"{what} answered JSON without a list of record objects")
    if "html" in content_type.lower() or looks_like_html(resp.text):
        # a maintenance page, or the login page of an expired session: worth a fresh page later
        title = title_of(resp.text) or "untitled"
        raise TransientError("PORTAL_HTML_ANSWER", f"{what} answered an HTML page titled {title!r}")
    raise PermanentError(
        "PORTAL_BAD_ANSWER", f"{what} answered neither JSON, CSV nor HTML ({content_type or 'no type'})"
    )
