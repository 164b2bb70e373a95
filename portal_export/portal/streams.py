"""Records read from an answer's byte stream one at a time, each as its line of the day file (the text
`json.dumps(record, ensure_ascii=False)` writes). JSON is read by json.loads' own scanner, so numbers,
strings and key order come out exactly as a whole-document json.loads gives them, big integers and NaN
included (ijson's yajl backend refuses integers past 64 bits). A CSV row becomes the object of its
header's names and the row's exact strings."""

from __future__ import annotations

import codecs
import csv
import functools
import io
import json
import re
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring
from json.scanner import make_scanner
from typing import Any, cast

from ..errors import PermanentError

CHUNK = 1 << 20
# The most text one value may take (a record, or a value beside the records): the reader holds it
# whole while it reads it. Python keeps up to 4 bytes a character: 64 MB at most.
MAX_VALUE_CHARS = 16 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NOT_RECORDS = "JSON without a list of record objects"
encode_record: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(r, ensure_ascii=False)


def bad_answer(what: str, why: str) -> PermanentError:
    return PermanentError("PORTAL_BAD_ANSWER", f"{what} answered {why}")


def text_codec(encoding: str | None) -> str:
    """A codec Python knows for an answer's charset (UTF-8 when none or unknown), a UTF-8 BOM dropped."""
    try:
        name = codecs.lookup(encoding or "utf-8").name
    except LookupError:
        name = "utf-8"
    return "utf-8-sig" if name == "utf-8" else name


class JSONReader:
    """A JSON document read from a binary stream value by value, with json.loads' own scanner."""

    def __init__(self, raw: io.BufferedReader[Any], encoding: str | None, what: str) -> None:
        self.raw, self.bad = raw, functools.partial(bad_answer, what)
        self.decoder = codecs.getincrementaldecoder(text_codec(encoding))(errors="replace")  # as requests' .text
        self.scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # the stubs misname its argument
        self.buf, self.pos, self.eof = "", 0, False

    def more(self) -> bool:
        """Read on into the buffer, dropping what was read; False at the end of the stream."""
        if self.eof:
            return False
        if len(self.buf) - self.pos > MAX_VALUE_CHARS:
            raise self.bad(f"JSON with a value of over {MAX_VALUE_CHARS} characters")
        data = self.raw.read(CHUNK)
        self.eof = not data
        self.buf, self.pos = self.buf[self.pos :] + self.decoder.decode(data, final=self.eof), 0
        return True

    def peek(self) -> str:
        """The next character after whitespace; "" at the end."""
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # always matches
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def take(self, chars: str) -> str:
        """The next character, one of `chars` (PermanentError otherwise)."""
        char = self.peek()
        if not char or char not in chars:
            raise self.bad(f"malformed JSON (expected one of {chars!r} at {char or 'the end'!r})")
        self.pos += 1
        return char

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                obj, end = self.scan(self.buf, self.pos)
            except (StopIteration, json.JSONDecodeError) as err:
                if self.more():
                    continue  # the value goes on in the next chunk
                raise self.bad(f"malformed JSON ({err})" if isinstance(err, ValueError) else "malformed JSON") from None
            if end == len(self.buf) and self.more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return obj

    def items(self) -> Iterator[str]:
        """After a list's "[": each record's line, to its "]". The loop of a whole answer: a record
        and the separator after it are read in one step while both are in the buffer."""
        if self.peek() == "]":
            self.pos += 1
            return
        scan, encode = self.scan, encode_record
        skip = cast(Callable[[str, int], re.Match[str]], _WHITESPACE.match)  # [ \t\n\r]* always matches
        while True:
            buf = self.buf
            try:
                record, end = scan(buf, skip(buf, self.pos).end())
                after = skip(buf, end).end()
                separator = buf[after]  # an IndexError when the buffer ends first
            except (StopIteration, ValueError, IndexError):
                record, separator = self.value(), ""  # across the buffer's end
            else:
                self.pos = after + 1
                if separator not in ",]":
                    raise self.bad(f"malformed JSON (expected one of ',]' at {separator!r})")
            if not isinstance(record, dict):
                raise self.bad(_NOT_RECORDS)
            yield encode(record)
            if (separator or self.take(",]")) == "]":
                return

    def records(self) -> Iterator[str]:
        """The lines of `{"records": [...], ...}` (other keys read past) or of a top-level list."""
        if self.take("{[") == "[":
            yield from self.items()
        else:
            yield from self.members()
        if self.peek():
            raise self.bad("malformed JSON (data after the document)")

    def members(self) -> Iterator[str]:
        found = False
        if self.peek() == "}":
            self.pos += 1
        else:
            while True:
                if self.peek() != '"':
                    raise self.bad("malformed JSON (a key that is no string)")
                key = self.value()
                self.take(":")
                if key == "records" and self.peek() == "[":
                    if found:
                        raise self.bad("JSON with two lists of records")
                    self.pos, found = self.pos + 1, True
                    yield from self.items()
                else:
                    self.value()  # another member: read past
                if self.take(",}") == "}":
                    break
        if not found:
            raise self.bad(_NOT_RECORDS)


def csv_lines(raw: io.BufferedReader[Any], encoding: str | None, what: str) -> Iterator[str]:
    """The lines of a CSV answer: the header's names with each row's exact strings, in file order."""
    text = io.TextIOWrapper(raw, encoding=text_codec(encoding), errors="replace", newline="")
    rows = csv.reader(text, strict=True)
    try:
        header = next(rows, None)
        if not header:
            raise bad_answer(what, "CSV without a header row")
        if len(set(header)) != len(header):
            raise bad_answer(what, "CSV with repeated header names")
        keys = [encode_basestring(name) + ": " for name in header]
        for row in rows:
            if not row:  # a blank line holds no record
                continue
            if len(row) != len(keys):
                raise bad_answer(what, f"CSV whose line {rows.line_num} has {len(row)} fields, the header {len(keys)}")
            # what encode_record gives for dict(zip(header, row)), at a third of its cost
            yield "{" + ", ".join([key + encode_basestring(value) for key, value in zip(keys, row, strict=True)]) + "}"
    except csv.Error as exc:
        raise bad_answer(what, f"malformed CSV ({exc})") from None
