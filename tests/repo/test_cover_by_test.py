"""tests/cover_by_test.py, behind `make cover-by-test`: on coverage data tagged by test as the
conftest tags it, it names the arcs that only unmeasured tests' processes reach."""

from coverage import CoverageData

from tests.helpers.cover_by_test import main


def tagged(path, reached):
    """A coverage data file: context -> arcs of one source file."""
    data = CoverageData(str(path))
    for context, arcs in reached.items():
        data.set_context(context)
        data.add_arcs({"/src/mod.py": set(arcs)})
    data.write()
    return str(path)


def test_an_arc_only_unmeasured_tests_reach_fails_naming_the_test(tmp_path, capsys):
    path = tagged(
        tmp_path / ".coverage",
        {
            "": [(1, 2)],  # the in-process tests
            "measured tests/test_a.py::test_a": [(1, 2), (2, 3)],
            "unmeasured tests/test_b.py::test_b[x]": [(2, 3), (3, 4)],
        },
    )
    assert main(path) == 1
    out = capsys.readouterr().out
    assert "only this unmeasured test's processes reach 1 arcs: tests/test_b.py::test_b[x]" in out
    assert "/src/mod.py:3->4" in out
    assert "0 measured tests' processes reach nothing the rest leave unreached" in out  # test_a alone reaches 2->3


def test_measured_tests_that_reach_nothing_else_are_listed_and_nothing_is_lost(tmp_path, capsys):
    path = tagged(
        tmp_path / ".coverage",
        {
            "": [(1, 2)],
            "measured tests/test_a.py::test_a": [(1, 2), (2, 3)],
            "measured tests/test_c.py::test_c": [(1, 2)],
            "unmeasured tests/test_b.py::test_b": [(2, 3)],
        },
    )
    assert main(path) == 0
    out = capsys.readouterr().out
    assert (
        "1 measured tests' processes reach nothing the rest leave unreached, each alone:\n    tests/test_c.py::test_c\n"
        in out
    )
    assert "unmeasured tests alone reaching arcs: 0" in out


def test_data_not_tagged_by_test_is_a_one_line_error(tmp_path, capsys):
    assert main(tagged(tmp_path / ".coverage", {"": [(1, 2)]})) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / '.coverage'} holds no data tagged by test: run make cover-by-test\n"
    )
