"""One home for state in the store: every key is spelled in portal_export/store_keys.py, and the state
modules share portal_export/state.py (a JSON dict or nothing, the stamp, liveness, generation
chains, the serial)."""

import ast
import datetime
import os
import subprocess
import sys
import threading
import time

import pytest

from portal_export import store_keys
from portal_export.state import (
    STAMP,
    Chain,
    alive,
    machine,
    new_run_id,
    read_dict,
    serial,
    split_run,
    stamp_of,
    stamped,
    this_host,
)
from portal_export.store import LocalStore
from tests import ROOT  # noqa: E402

HOME = ROOT / "portal_export" / "store_keys.py"
STATE_LITERAL = "_state/"


# ------------------------------------------------------------------------- no key spelled twice


def _documentation(tree: ast.AST) -> set[int]:
    """ids of the string constants that are documentation: docstrings, and any bare string statement."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def code_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string or bytes constant of the code (f-strings' parts included), without
    comments (not in the syntax tree) and docstrings: those may name paths for people."""
    tree = ast.parse(source)
    docs = _documentation(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docs:
            if isinstance(node.value, str):
                found.append((node.lineno, node.value))
            elif isinstance(node.value, bytes):
                found.append((node.lineno, node.value.decode("latin-1")))
    return found


def spellers(literal: str = STATE_LITERAL) -> dict[str, list[int]]:
    """file (relative) -> lines where code spells `literal`, over portal_export/, tasks/ and ops/."""
    found: dict[str, list[int]] = {}
    for folder in ("portal_export", "tasks", "ops"):
        for path in sorted((ROOT / folder).rglob("*.py")) if (ROOT / folder).is_dir() else []:
            if path == HOME:
                continue
            lines = [line for line, text in code_literals(path.read_text()) if literal in text]
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_no_state_key_is_spelled_outside_keys_py():
    found = spellers()
    assert not found, "`_state/` spelled outside portal_export/store_keys.py (use its names): " + ", ".join(
        f"{path} (line {', '.join(map(str, lines))})" for path, lines in found.items()
    )


def test_the_check_sees_code_and_skips_comments_and_docstrings():
    source = '''"""Module doc: `_state/runs/` for people."""
# a comment: _state/cap.json
class A:
    """Class doc: _state/x"""
    def f(self, kind):
        """Function doc: _state/y"""
        "a bare string statement: _state/z"
        return f"_state/{kind}/", "_sta" "te/w", b"_state/b"
'''
    lines = [line for line, text in code_literals(source) if STATE_LITERAL in text]
    assert lines == [8, 8, 8]  # the f-string's part, the joined literal, the bytes; nothing else


def test_keys_py_is_where_the_state_keys_are():
    assert any(STATE_LITERAL in text for _, text in code_literals(HOME.read_text()))


# ----------------------------------------------------------------------------- the key strings


DAY = datetime.date(2026, 6, 1)


def test_the_key_strings_stay_what_data_dirs_hold():
    """Existing data dirs, other hosts and outside readers use these names: they never change."""
    assert store_keys.day_records(DAY) == "portal_records_2026-06-01.jsonl"
    assert store_keys.day_health(DAY) == "portal_records_2026-06-01.health.json"
    assert store_keys.day_objects_prefix([DAY, DAY.replace(day=30)]) == "portal_records_2026-06-"
    assert store_keys.region(DAY, "north") == "regions/2026-06-01/north.jsonl"
    assert store_keys.failed_health(DAY) == "regions/2026-06-01/failed.health.json"
    assert store_keys.failures_prefix(DAY) == "regions/2026-06-01/failures/"
    assert store_keys.region_failure(DAY, "north") == "regions/2026-06-01/failures/region-north.json"
    assert store_keys.day_failure(DAY) == "regions/2026-06-01/failures/day.json"
    assert store_keys.REPORT == "report/"
    assert store_keys.breaker("ab12") == "_state/breaker-ab12.json"
    assert store_keys.run("host-a-17") == "_state/runs/host-a-17.json"
    assert store_keys.run_of("_state/runs/host-a-17.json") == "host-a-17"
    assert store_keys.mark("inflight", "host-a-17", 42, 3) == "_state/inflight/host-a-17-42-3"
    assert store_keys.mark("waiting", "host-a-17", 42, 3) == "_state/waiting/host-a-17-42-3"
    assert store_keys.mark_of("host-a-17-42-3") == ("host-a-17", "42")
    assert store_keys.CAP == "_state/cap.json"
    assert store_keys.PLAN_POKE == "_state/plan-poke.json"
    assert store_keys.PLAN_BUSY == "_state/plan-busy.json"
    change = store_keys.cap_change(1780000000.5, 2, 4, "host-a-17", 9)
    assert change == "_state/cap-log/1780000000.500000-2-4-host-a-17-9.json"
    assert store_keys.cap_change_of(change) == (1780000000.5, 2, 4, "host-a-17")
    assert store_keys.cap_change_of("_state/cap-log/notes.txt") is None
    assert store_keys.governor_lease("k") == "_state/governor/k/"
    assert store_keys.alert_claims("f1") == "_state/alerts/f1/"
    assert store_keys.generation("_state/alerts/f1/", 3) == "_state/alerts/f1/00000003.json"
    assert store_keys.generation_of("_state/alerts/f1/", "_state/alerts/f1/00000003.json") == 3


def test_the_luigi_layer_builds_its_targets_from_these_keys(tmp_path, monkeypatch):
    from tasks.day import DayExport
    from tasks.region import RegionExport

    monkeypatch.setenv("PORTAL_DATA_DIR", str(tmp_path))
    day = DayExport(DAY)
    assert RegionExport(DAY, "north").output().path == str(tmp_path / store_keys.region(DAY, "north"))
    assert day.output()["records"].path == str(tmp_path / store_keys.day_records(DAY))
    assert day.output()["health"].path == str(tmp_path / store_keys.day_health(DAY))
    assert RegionExport(DAY, "north").failure_key() == store_keys.region_failure(DAY, "north")
    assert day.failure_key() == store_keys.day_failure(DAY)


# ------------------------------------------------------------------------------------ read_dict


class FailingStore(LocalStore):
    def read(self, key):
        raise OSError("disk said no")


@pytest.mark.parametrize(
    "data",
    [b"{not json", b'{"a": 1', b"\xff\xfe garbage", b"", b"[1, 2]", b"3", b'"text"', b"null"],
)
def test_a_garbled_or_foreign_object_is_no_dict(tmp_path, data):
    store = LocalStore(tmp_path)
    store.write("_x/k.json", data)
    assert read_dict(store, "_x/k.json") is None
    unreadable = {"code": "UNREADABLE"}
    got = read_dict(store, "_x/k.json", unreadable=unreadable)
    if data == b"null":  # JSON's null is read as no object at all
        assert got is None
    else:
        assert got == unreadable and got is not unreadable  # a copy: the caller may change it


def test_read_dict_reads_a_dict_and_nothing_when_absent(tmp_path):
    store = LocalStore(tmp_path)
    assert read_dict(store, "_x/none.json") is None
    assert read_dict(store, "_x/none.json", unreadable={"code": "X"}) is None  # absent is not unreadable
    store.write("_x/k.json", b'{"a": 1, "b": [2]}')
    assert read_dict(store, "_x/k.json") == {"a": 1, "b": [2]}


def test_what_read_dict_tolerates_is_the_callers(tmp_path):
    store = LocalStore(tmp_path)
    store.write("_x/k.json", b"{garbled")
    with pytest.raises(ValueError):
        read_dict(store, "_x/k.json", tolerate=())  # an alert claim's reader sends rather than guess
    store.write("_x/k.json", b"[]")
    assert read_dict(store, "_x/k.json", tolerate=()) is None  # a foreign shape is still no dict
    failing = FailingStore(tmp_path)
    with pytest.raises(OSError):
        read_dict(failing, "_x/k.json")
    assert read_dict(failing, "_x/k.json", unreadable={"c": 1}, tolerate=(OSError, ValueError)) == {"c": 1}


# --------------------------------------------------------------------------------------- stamps


def test_one_stamp_name():
    assert STAMP == "t"
    assert stamped({"run": "r"}, 5.0) == {"run": "r", "t": 5.0}
    before = stamped({})["t"]
    assert abs(before - time.time()) < 5
    assert stamp_of({"t": 7}) == 7.0
    assert stamp_of({"t": None}) is None
    assert stamp_of({"t": "12.5"}) == 12.5
    assert stamp_of({}) is None
    with pytest.raises(ValueError):
        stamp_of({"t": "soon"})
    with pytest.raises(TypeError):
        stamp_of({"t": [1]})


# ------------------------------------------------------------------------------------- liveness


def dead_pid():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def never():
    raise AssertionError("the heartbeat was asked although the verdict did not need it")


def here():
    return True


def test_a_run_of_this_machine_lives_with_its_pid_and_its_heartbeat():
    me = f"{this_host()}-{os.getpid()}-0badc0de"
    assert alive(me, lambda: 1e9, ttl=10, here=here)  # however old its heartbeat: the pid tells
    assert not alive(me, lambda: None, ttl=10, here=here)  # it ended: its heartbeat is gone
    assert not alive(f"{this_host()}-{dead_pid()}-0badc0de", never, ttl=10, here=here)  # dead at once, nothing asked


def test_a_process_of_a_run_on_this_machine_lives_with_its_own_pid():
    run = f"{this_host()}-1-0badc0de"
    assert alive(run, never, ttl=10, pid=os.getpid(), here=here)
    assert not alive(run, never, ttl=10, pid=dead_pid(), here=here)


def test_a_run_elsewhere_lives_while_its_heartbeat_is_younger_than_the_ttl():
    """Elsewhere: another host, or this hostname in another PID namespace (`here` says no)."""
    for other in ("other-host-4242-0badc0de", f"{this_host()}-{os.getpid()}-1badc0de"):
        assert alive(other, lambda: 9.9, ttl=10)
        assert not alive(other, lambda: 10.0, ttl=10)
        assert not alive(other, lambda: None, ttl=10)
        assert alive(other, lambda: 1.0, ttl=10, pid=dead_pid())  # another namespace's pid means nothing here
        asked = []
        alive(other, lambda: asked.append(1) or 1.0, ttl=10)  # noqa: B023 (called at once)
        assert asked == [1]  # once


def test_a_run_id_names_host_and_pid_and_no_other_run_has_it():
    run = new_run_id()
    assert split_run(run) == (this_host(), os.getpid())
    assert run.startswith(f"{this_host()}-{os.getpid()}-") and new_run_id() != run
    assert split_run("host-a-17-0badc0de") == ("host-a", 17)
    for name in ("nohyphen", "-17-0badc0de", "host-0badc0de", "host-x1-0badc0de", "host-a-17", "host-a-17-0BADC0DE"):
        assert split_run(name) is None
        assert not alive(name, never, ttl=10, here=here)


def test_this_machine_is_its_boot_and_pid_namespace():
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert machine() == f"{f.read().strip()} {os.readlink('/proc/self/ns/pid')}"


# ------------------------------------------------------------------------------ generation chain


def test_a_chain_numbers_its_generations_and_each_is_created_once(tmp_path):
    store = LocalStore(tmp_path)
    chain = Chain(store, store_keys.alert_claims("f1"))
    assert chain.newest() is None and chain.first == 0
    assert chain.create(0, {"host": "a"})
    assert not chain.create(0, {"host": "b"})  # taken: the first writer keeps it
    assert chain.read(0) == {"host": "a"}
    assert chain.create(1, {"host": "b"}) and chain.newest() == 1
    assert store.list("_state/alerts/f1/") == ["_state/alerts/f1/00000000.json", "_state/alerts/f1/00000001.json"]
    assert chain.read(7) is None


def test_the_newest_generation_is_the_highest_number_and_foreign_objects_are_skipped(tmp_path):
    store = LocalStore(tmp_path)
    chain = Chain(store, "_x/chain/")
    for n in (3, 12, 9):
        chain.create(n, {"n": n})
    store.write("_x/chain/notes.txt", b"not a generation")
    assert chain.newest() == 12
    store.write("_x/chain/readme.json", b"{}")
    with pytest.raises(ValueError):
        chain.newest()  # a .json that is no generation: nothing of ours writes one


def test_a_garbled_generation_reads_as_none_unless_its_reader_wants_to_know(tmp_path):
    store = LocalStore(tmp_path)
    chain = Chain(store, "_x/chain/")
    store.write(chain.key(0), b"{half a rec")
    assert chain.read(0) is None
    with pytest.raises(ValueError):
        chain.read(0, tolerate=())


def test_pruning_keeps_the_newest_and_looks_only_so_far_back(tmp_path):
    store = LocalStore(tmp_path)
    chain = Chain(store, "_x/lease/", first=1)
    for n in range(1, 15):
        chain.create(n, {"run": f"r-{n}"})
    chain.prune(14, keep=2)  # 4..12 deleted (reach 10), 13 and 14 kept, 1..3 out of reach
    assert [store_keys.generation_of("_x/lease/", k) for k in store.list("_x/lease/")] == [1, 2, 3, 13, 14]
    chain.prune(2, keep=2)  # nothing before the first generation is touched
    assert len(store.list("_x/lease/")) == 5


def test_of_writers_racing_for_one_generation_one_wins(tmp_path):
    store = LocalStore(tmp_path)
    chain = Chain(store, "_x/race/")
    won, start = [], threading.Barrier(8)

    def writer(n):
        start.wait()
        if chain.create(0, {"w": n}):
            won.append(n)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and chain.read(0) == {"w": won[0]}


# --------------------------------------------------------------------------------------- serial


def test_the_serial_never_repeats_in_a_process():
    seen, lock = [], threading.Lock()

    def take():
        mine = [serial() for _ in range(500)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == len(set(seen)) == 2000
    a, b = serial(), serial()
    assert b > a
