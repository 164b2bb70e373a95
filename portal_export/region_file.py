"""A region's target: its solve facts on the first line, then its records, one a line, each exactly
as the day file holds it. So a reader of the facts stops after one line, and the day file is the
regions' record lines one after another, copied, never parsed again."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from .errors import PermanentError

CHUNK = 1 << 20
BATCH = 2000  # lines encoded and written at once


class Spool:
    """The delivering attempt's records, in an anonymous temporary file (gone with the process, even
    a killed one), until the facts that go before them are known. `fill` is the attempt's sink."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by __exit__)
        self.rows = 0

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def fill(self, lines: Iterator[str]) -> int:
        """Take an answer's record lines, in place of an earlier attempt's; how many there were."""
        self.file.seek(0)
        self.file.truncate()
        self.rows = 0
        while batch := list(itertools.islice(lines, BATCH)):
            self.file.write("\n".join(batch).encode() + b"\n")
            self.rows += len(batch)
        return self.rows

    def write_to(self, out: IO[bytes], facts: dict[str, Any]) -> None:
        """The region's target: the facts' line, then the records."""
        out.write(json.dumps(facts, ensure_ascii=False).encode() + b"\n")
        self.file.seek(0)
        shutil.copyfileobj(self.file, out, CHUNK)


def read_facts(f: IO[bytes]) -> dict[str, Any]:
    """A region target's facts: its first line (the records after it left unread)."""
    try:
        facts = json.loads(f.readline())
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        raise PermanentError("REGION_TARGET_CORRUPT", "a region target does not start with its facts")
    return facts


def copy_records(f: IO[bytes], out: IO[bytes], rows: int, what: str) -> None:
    """The record lines after the facts, copied as they are; they must be `rows` whole lines."""
    lines, last = 0, b"\n"
    while chunk := f.read(CHUNK):
        out.write(chunk)
        lines += chunk.count(b"\n")
        last = chunk[-1:]
    if lines != rows or last != b"\n":
        raise PermanentError("REGION_TARGET_CORRUPT", f"{what} holds {lines} record lines, its facts say {rows}")
