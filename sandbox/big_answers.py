"""Answers of any size (SandboxConfig.answer_bytes), made while they are sent: a block of records is
rendered once and sent pass after pass with the pass's number in every record id, so the portal
holds one block, never the answer. The same blocks give the lines the day file must hold.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator

from .portal_data import CSV_HEADER, expected_csv_records, expected_records

BLOCK = 1000  # records rendered at once
PASS = "~pass~"  # stands in every record id for the pass's number


class BigAnswer:
    """The answer of one (day, region) of at least `size` bytes: JSON `{"records": [...]}`, or CSV."""

    def __init__(self, day: str, region: str, size: int, as_csv: bool) -> None:
        records = expected_records(day, region, (BLOCK, BLOCK))
        for r in records:
            r["record_id"] = f"{region}-{day}-{PASS}-{r['record_id'].rsplit('-', 1)[1]}"
        if as_csv:
            rows = expected_csv_records(day, region, (BLOCK, BLOCK))
            for row, r in zip(rows, records, strict=True):
                row["record_id"] = r["record_id"]
            out = io.StringIO()
            csv.DictWriter(out, fieldnames=CSV_HEADER).writerows(rows)
            self.head, self.block, self.sep, self.tail = ",".join(CSV_HEADER) + "\r\n", out.getvalue(), "", ""
        else:
            rows = records
            self.block = ", ".join(json.dumps(r, ensure_ascii=False) for r in records)
            self.head, self.sep, self.tail = '{"records": [', ", ", "]}"
        self.lines_block = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        self.passes = max(1, math.ceil(size / len(self.block.encode())))
        self.rows = self.passes * BLOCK
        self.content_type = "text/csv; charset=utf-8" if as_csv else "application/json"

    def chunks(self) -> Iterator[bytes]:
        """The answer's bytes, a block at a time."""
        yield self.head.encode()
        for n in range(self.passes):
            yield ((self.sep if n else "") + self.block.replace(PASS, f"{n:07d}")).encode()
        yield self.tail.encode()

    def lines(self) -> Iterator[bytes]:
        """The region's lines of the day file, a block at a time."""
        for n in range(self.passes):
            yield self.lines_block.replace(PASS, f"{n:07d}").encode()
