"""`[portal] record_checks` applied while an answer's records stream past: a portal that ignored the
posted date or market (a mistyped field name leaves the page's default) answers records of another
day or market, and those must never become the asked-for day's data. Each line is checked before it
is handed on, so a mismatch at the millionth record still fails the attempt before anything is kept."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import PermanentError

CODE = "PORTAL_RECORDS_MISMATCH"
_ABSENT = object()


def as_text(value: Any) -> str:
    """A record's value as the checks compare it: a string as it is, anything else as its JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def checked(lines: Iterator[str], wanted: Sequence[tuple[str, str]], what: str) -> Iterator[str]:
    """`lines` (records, each its JSON line) as they come, once each carries every (field, value) of `wanted`."""
    for n, line in enumerate(lines, 1):
        record = json.loads(line)
        for name, value in wanted:
            found = record.get(name, _ABSENT)
            if found is _ABSENT or as_text(found) != value:
                shown = "no such field" if found is _ABSENT else f"{name}={as_text(found)[:80]!r}"
                raise PermanentError(
                    CODE,
                    f"{what}: record {n} of the answer has {shown}, [portal] record_checks wants {name}={value!r}: "
                    "the portal answered for something else than was posted (check [portal] export_fields)",
                )
        yield line
