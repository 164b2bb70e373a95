"""The docs' tables name everything the code offers an operator (tests/helpers/docs_inventory.py reads it).

- every exit code of every `python -m ops` command: in docs/operations.md "Exit codes", on the
  command's row of its table by command; the codes every command shares on the row for every command;
- every environment variable the code reads and every make variable: docs/configuration.md
  "Environment variables";
- every error code raised, recorded or reported: docs/failures.md;
- every luigi.cfg key the code reads, and every key luigi.cfg sets: docs/configuration.md, under a
  heading naming its section.
"""

import ast
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import docs_inventory as inventory
from tests.helpers.code_reading import modules

ROOT = inventory.ROOT
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def section(page: str, title: str) -> str:
    """The text under the heading `title` of docs/`page`, down to the next heading of its level or above."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if m and m.group(2).strip() == title:
            level = len(m.group(1))
            end = next(
                (j for j in range(i + 1, len(lines)) if (h := HEADING.match(lines[j])) and len(h.group(1)) <= level),
                len(lines),
            )
            return "\n".join(lines[i + 1 : end])
    raise AssertionError(f"docs/{page} has no heading {title!r}")


def blocks_naming(page: str, words: str) -> str:
    """Every block of docs/`page` under a heading (any level) that contains `words`, to the next heading."""
    found, keep = [], False
    for line in (ROOT / "docs" / page).read_text().splitlines():
        m = HEADING.match(line)
        if m:
            keep = words in m.group(2)
        if keep:
            found.append(line)
    return "\n".join(found)


def named(text: str, name: str) -> bool:
    """`name` in inline code, alone or as NAME=value."""
    return re.search(rf"`{re.escape(name)}(=[^`]*)?`", text) is not None


def in_code(text: str, phrase: str) -> bool:
    """`phrase` inside an inline code span of `text`."""
    return re.search(rf"`[^`\n]*{re.escape(phrase)}[^`\n]*`", text) is not None


def table_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("|")
    ]


def rows_for(text: str, command: str) -> str:
    """The rows of the exit codes' tables whose first cell names `command` (as `plan` or `make plan`)."""
    pattern = re.compile(rf"`(make )?{re.escape(command)}`")
    return "\n".join(" | ".join(r) for r in table_rows(text) if pattern.search(r[0]))


def every_command_row(text: str) -> str:
    rows = [" | ".join(r) for r in table_rows(text) if "every command" in r[0]]
    assert rows, "docs/operations.md#exit-codes: no row for every command"
    return rows[0]


def test_every_exit_code_of_every_command_is_documented():
    text = section("operations.md", "Exit codes")
    everyone = every_command_row(text)
    missing = [
        f"every command: `{code}`" for code in sorted(inventory.dispatcher_exit_codes()) if f"`{code}`" not in everyone
    ]
    commands = inventory.command_exit_codes()
    assert {"export", "plan", "scheduler", "metrics-server"} <= set(commands), f"commands not found: {commands}"
    for command, codes in sorted(commands.items()):
        own = rows_for(text, command)
        if not own:
            missing.append(f"`{command}`: no row")
        # on its own row, also a code the row for every command has: `2` of alert-test is its own cause
        missing += [f"`{command}`: `{code}`" for code in sorted(codes) if f"`{code}`" not in own]
    assert not missing, "docs/operations.md#exit-codes leaves out:\n" + "\n".join(missing)


def test_the_run_s_last_line_is_quoted_as_the_run_prints_it():
    """The summary's footer (portal_export/alert_text.py) is what the docs tell an operator to look for."""
    tree = modules()["portal_export.alert_text"].tree
    footers = [
        "".join(v.value if isinstance(v, ast.Constant) else "30" for v in node.values)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and isinstance(node.values[0], ast.Constant)
        and node.values[0].value.startswith("exit code")
    ]
    assert footers == ["exit code 30"], footers
    assert in_code(section("operations.md", "Exit codes"), footers[0])


def test_every_environment_and_make_variable_is_documented():
    text = section("configuration.md", "Environment variables")
    read = inventory.environment_reads()
    assert {"CAPTCHAAI_API_KEY", "PORTAL_VAR_DIR", "SMTP_PASSWORD"} <= set(read), read
    missing = [f"{name} (read in {where})" for name, where in sorted(read.items()) if not named(text, name)]
    missing += [f"{name} (Makefile)" for name in sorted(inventory.make_variables()) if not named(text, name)]
    assert not missing, 'docs/configuration.md "Environment variables" leaves out:\n' + "\n".join(missing)


def test_every_error_code_is_documented():
    text = (ROOT / "docs" / "failures.md").read_text()
    codes = inventory.error_codes()
    assert {"PLAN_BUSY", "STORE_ERROR", "POLL_DEADLINE", "PORTAL_HTTP_{}"} <= set(codes), codes
    missing = []
    for code, where in sorted(codes.items()):
        shown = re.escape(code).replace(r"\{\}", "[^`]+")  # PORTAL_HTTP_{}: `PORTAL_HTTP_<status>`
        if not re.search(rf"`{shown}`", text):
            missing.append(f"{code} ({where})")
    assert not missing, "docs/failures.md leaves out:\n" + "\n".join(missing)


def test_every_luigi_cfg_key_is_documented():
    read = inventory.config_reads()
    assert {("core", "logging_conf_file"), ("retcode", "task_failed"), ("portal", "regions")} <= read, read
    missing = []
    for section_name, key in sorted(read | inventory.luigi_cfg_keys()):
        if not named(blocks_naming("configuration.md", f"[{section_name}]"), key):
            missing.append(f"[{section_name}] {key}")
    assert not missing, "docs/configuration.md leaves out:\n" + "\n".join(missing)


@pytest.mark.live
def test_make_exits_2_for_a_failed_recipe_and_names_its_code(tmp_path: Path):
    """What the docs say of make: its own code, and the line that names the command's."""
    (tmp_path / "Makefile").write_text("fail:\n\texit 30\n")
    done = subprocess.run(["make", "-s", "-C", str(tmp_path), "fail"], capture_output=True, text=True)
    said = re.search(r"Error 30\b", done.stderr)
    assert said, done.stderr
    text = section("operations.md", "Exit codes")
    assert f"`{done.returncode}`" in text and in_code(text, said.group(0)), (done.returncode, done.stderr)


def make_n(*args: str) -> str:
    done = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.live
@pytest.mark.parametrize(
    ("target", "variable", "option"),
    [
        ("backfill START=2026-01-01 STOP=2026-01-02", "NEWEST_FIRST", "--newest-first"),
        ("prune", "DRY_RUN", "--dry-run"),
    ],
)
def test_make_flags_are_off_for_0_no_false_and_empty(target: str, variable: str, option: str):
    for value in ("", "0", "no", "false"):
        assert option not in make_n(*target.split(), f"{variable}={value}"), f"{variable}={value}"
    for value in ("1", "yes", "true"):
        assert option in make_n(*target.split(), f"{variable}={value}"), f"{variable}={value}"
