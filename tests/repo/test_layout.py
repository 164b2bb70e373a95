"""The rooms and the one-way arrows between them (docs/development.md "Code layout").

commands (ops) -> tasks -> core (portal_export); the sandbox's stand-ins, launchers and demos are
used by the demos, the tests and the bench only, and the wheel ships none of them (nor a test secret).
"""

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import ROOT  # noqa: E402

PROJECT = {"portal_export", "tasks", "ops", "sandbox", "bench", "tests"}
# What each room may import of the project's packages (besides itself).
MAY_IMPORT = {
    "portal_export": set(),
    "tasks": {"portal_export"},
    "ops": {"tasks", "portal_export"},
}
# The sandbox's launchers and demos drive the real project; its protocol stand-ins check the client
# against the protocol, not against the client's own idea of it, so they import none of it.
SANDBOX_DRIVERS = {"luigid.py", "seaweedfs.py", "demo.py", "demo_fleet.py"}


def imported_packages(path: Path) -> set[str]:
    """The project's top-level packages `path` imports anywhere (module level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & PROJECT


def test_arrows_run_one_way_commands_tasks_core():
    wrong = []
    for room, allowed in MAY_IMPORT.items():
        for path in sorted((ROOT / room).rglob("*.py")):
            bad = imported_packages(path) - allowed - {room}
            if bad:
                wrong.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not wrong, "\n".join(wrong)


def test_the_core_imports_no_luigi():
    wrong = []
    for path in sorted((ROOT / "portal_export").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        if any(name.split(".")[0] == "luigi" for name in names):
            wrong.append(str(path.relative_to(ROOT)))
    assert not wrong, f"the core imports Luigi: {wrong}"


def test_the_protocol_stand_ins_import_nothing_of_the_project():
    wrong = []
    for path in sorted((ROOT / "sandbox").glob("*.py")):
        if path.name not in SANDBOX_DRIVERS and (bad := imported_packages(path) - {"sandbox"}):
            wrong.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.unmeasured
@pytest.mark.parametrize(
    ("module", "must_not_load"),
    [
        ("tasks", {"ops", "sandbox", "bench"}),  # what `luigi --module tasks` loads
        ("ops.cli", {"sandbox", "bench"}),
        ("portal_export.retry_policy", {"tasks", "ops", "sandbox", "luigi"}),
    ],
)
def test_importing_a_room_loads_nothing_beyond_its_arrows(module, must_not_load):
    code = (
        f"import sys, {module}; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(must_not_load)!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"importing {module} loaded {done.stdout.strip()}"


@pytest.mark.live  # a pip build in a process of its own
def test_the_wheel_ships_no_stand_in_and_no_test_secret(tmp_path):
    from sandbox.seaweedfs import SECRET_KEY

    # A copy of the tree: setuptools' build/ in the clone could carry files of an older layout.
    source = tmp_path / "source"
    junk = (".git", ".venv*", "var", "data", "build", "*.egg-info", "__pycache__", ".*_cache", "out", ".coverage*")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*junk))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tops = {name.split("/")[0] for name in names if "/" in name and ".dist-info" not in name}
        assert tops == {"portal_export", "tasks", "ops"}, tops
        leaking = [name for name in names if SECRET_KEY.encode() in z.read(name)]
    assert not leaking, f"the test secret ships in {leaking}"


def test_the_tests_say_the_regions_a_wait_and_a_config_once():
    """One REGIONS (the sandbox's, which are luigi.cfg's; the bench's too), one wait_for
    (tests/helpers/runs.py) and one config writer (tests/helpers/cfg.py): whoever needs them imports them."""
    import configparser

    from sandbox import REGIONS

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "luigi.cfg")
    assert tuple(cfg["portal"]["regions"].split(",")) == REGIONS
    found = {}
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        for node in ast.parse(path.read_text()).body:
            names = [node.name] if isinstance(node, ast.FunctionDef) else []
            names += [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            for name in set(names) & {"REGIONS", "wait_for", "write_cfg", "cfg_text", "layered"}:
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert found == {
        "wait_for": ["tests/helpers/runs.py"],
        "write_cfg": ["tests/helpers/cfg.py"],
        "cfg_text": ["tests/helpers/cfg.py"],
    }


def test_no_function_of_the_product_is_over_60_lines_but_the_plot():
    """A function a reader holds in one screen; the report's one matplotlib figure is exempt."""
    exempt = {("portal_export/report.py", "plot_health")}
    long = []
    for room in MAY_IMPORT:
        for path in sorted((ROOT / room).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (where, node.name) in exempt:
                    continue
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 60:
                    long.append(f"{where}:{node.lineno} {node.name} ({size} lines)")
    assert not long, "\n".join(long)
