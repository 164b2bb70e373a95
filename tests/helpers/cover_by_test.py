"""Which tests' processes alone reach a line or branch: the check behind the `unmeasured` marks.

`make cover-by-test` runs the suite with every test's processes measured, each one's data tagged
with the id and the mark of the test that started it (tests/conftest.py), then this. It prints
- the branches (arcs) that only processes of tests marked `unmeasured` reach: `make cover` loses
  them, so such a test is measured again or the code gets a test of its own (exit status 1);
- the measured tests whose processes reach nothing that the in-process tests or another test's
  processes leave unreached: each, alone, could be marked `unmeasured` if it is slow.
"""

import os
import re
import sys
from collections import defaultdict

from coverage import CoverageData


def arcs_by_context(data: CoverageData) -> dict[tuple[str, int, int], set[str]]:
    reached: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for context in data.measured_contexts():
        data.set_query_contexts([f"^{re.escape(context)}$"])  # patterns: a test's id is none
        for path in data.measured_files():
            for start, end in data.arcs(path) or ():
                reached[(path, start, end)].add(context)
    return reached


def main(path: str = ".coverage") -> int:
    data = CoverageData(path)
    data.read()
    reached = arcs_by_context(data)
    if not any(c.startswith(("measured ", "unmeasured ")) for found in reached.values() for c in found):
        print(f"error: {path} holds no data tagged by test: run make cover-by-test", file=sys.stderr)
        return 2

    lost: dict[str, list[str]] = defaultdict(list)
    for (file, start, end), contexts in sorted(reached.items()):
        if all(c.startswith("unmeasured ") for c in contexts):
            for context in contexts:
                lost[context.removeprefix("unmeasured ")].append(f"{os.path.relpath(file)}:{start}->{end}")
    for test, arcs in sorted(lost.items()):
        print(f"only this unmeasured test's processes reach {len(arcs)} arcs: {test}")
        for arc in arcs[:10]:
            print(f"    {arc}")

    redundant = []
    measured = {c for found in reached.values() for c in found if c.startswith("measured ")}
    for test in sorted(measured):
        alone = [found for found in reached.values() if test in found]
        if all(found - {test} - {c for c in found if c.startswith("unmeasured ")} for found in alone):
            redundant.append(test.removeprefix("measured "))
    print(f"{len(redundant)} measured tests' processes reach nothing the rest leave unreached, each alone:")
    for test in redundant:
        print(f"    {test}")
    print(f"unmeasured tests alone reaching arcs: {len(lost)}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
