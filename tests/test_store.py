"""The local store: whole writes, the conditional create, listings by prefix."""

import threading

from portal_export.store import LocalStore, read_json, write_json


def test_write_read_list_delete(tmp_path):
    store = LocalStore(tmp_path / "data")
    assert store.read("regions/2026-06-01/north.json") is None
    write_json(store, "regions/2026-06-01/north.json", {"rows": 3})
    write_json(store, "regions/2026-06-02/east.json", {"rows": 1})
    store.write("portal_records_2026-06-01.jsonl", b"{}\n")
    assert read_json(store, "regions/2026-06-01/north.json") == {"rows": 3}
    assert store.list("regions/") == ["regions/2026-06-01/north.json", "regions/2026-06-02/east.json"]
    assert store.list("portal_records_") == ["portal_records_2026-06-01.jsonl"]
    assert store.list("nothing/") == []
    assert store.exists("portal_records_2026-06-01.jsonl")
    store.delete("portal_records_2026-06-01.jsonl")
    store.delete("portal_records_2026-06-01.jsonl")  # absent: nothing
    assert not store.exists("portal_records_2026-06-01.jsonl")
    assert store.location("a/b.json") == str(tmp_path / "data" / "a" / "b.json")
    assert not [p for p in (tmp_path / "data").rglob(".*")]  # no temporary file left


def test_create_is_won_once_among_racers(tmp_path):
    store = LocalStore(tmp_path)
    wins = []
    barrier = threading.Barrier(8)

    def race(n):
        barrier.wait()
        if store.create("_state/lease-1.json", f'{{"n": {n}}}'.encode()):
            wins.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert read_json(store, "_state/lease-1.json") == {"n": wins[0]}
    assert not store.create("_state/lease-1.json", b"{}")
    assert store.list("_state/") == ["_state/lease-1.json"]  # the losers' temporaries are gone
