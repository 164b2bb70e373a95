"""Reading the form post's answer as it arrives: JSON records, a JSON list, or CSV (every value the
file's exact string: no number, date or NA guessing); an HTML page is no answer yet."""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from email.message import Message
from typing import Any

import requests

from ..errors import TransientError
from .page import looks_like_html, title_of
from .streams import CHUNK, JSONReader, bad_answer, csv_lines, text_codec

HANDLING = (
    'JSON {"records": [...]}, a JSON list of objects, or CSV (Content-Type text/csv, or an attachment '
    "named *.csv: header keys, exact strings); a 200 HTML page is retried from a fresh page"
)


def is_csv(content_type: str, disposition: str) -> bool:
    if content_type.split(";")[0].strip().lower() in ("text/csv", "application/csv"):
        return True
    header = Message()  # the standard library's parser of Content-Disposition, filename*= included
    header["Content-Disposition"] = disposition
    return (header.get_filename() or "").lower().endswith(".csv")


class ResponseStream(io.RawIOBase):
    """The body of a streamed response as a binary file (decoded as sent: gzip undone); a network
    error while reading is transient, like one before the answer."""

    def __init__(self, resp: requests.Response, what: str) -> None:
        self.chunks, self.what = resp.iter_content(CHUNK), what
        self.rest = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.rest:
            failure = None
            try:
                chunk = next(self.chunks, None)
            except requests.RequestException as exc:
                failure = type(exc).__name__  # raised outside the handler: no chained traceback
            if failure:
                raise TransientError("PORTAL_NETWORK_ERROR", f"{failure} while reading {self.what}")
            if chunk is None:
                return 0
            self.rest = memoryview(chunk)
        n = min(len(buffer), len(self.rest))
        buffer[:n], self.rest = self.rest[:n], self.rest[n:]
        return n


def read_answer(resp: requests.Response, what: str) -> Iterator[str]:
    """The records of a 2xx answer to the form post, each as its line of the day file, read from the
    response as they arrive; or the error it amounts to (at once, or while reading on)."""
    content_type = resp.headers.get("Content-Type", "")
    raw = io.BufferedReader(ResponseStream(resp, what), CHUNK)
    if is_csv(content_type, resp.headers.get("Content-Disposition", "")):
        # a CSV without a charset is read as UTF-8: requests' ISO-8859-1 default would garble it
        return csv_lines(raw, resp.encoding if "charset=" in content_type.lower() else None, what)
    if raw.peek(CHUNK)[:4096].removeprefix(codecs.BOM_UTF8).lstrip()[:1] in (b"{", b"["):
        guessed = requests.utils.guess_json_utf(raw.peek(4))  # type: ignore[no-untyped-call]
        return JSONReader(raw, resp.encoding or guessed, what).records()  # the encoding requests' .json() takes
    text = raw.read(CHUNK).decode(text_codec(resp.encoding), "replace")
    if "html" in content_type.lower() or looks_like_html(text):
        # a maintenance page, or the login page of an expired session: worth a fresh page later
        title = title_of(text) or "untitled"
        raise TransientError("PORTAL_HTML_ANSWER", f"{what} answered an HTML page titled {title!r}")
    raise bad_answer(what, f"neither JSON records, CSV nor HTML ({content_type or 'no type'})")
