"""The suite's order under pytest-xdist's worksteal (tests/conftest.py's long_first)."""

from tests.conftest import long_first


class Item:
    def __init__(self, name, long=False):
        self.name, self.long = name, long

    def get_closest_marker(self, name):
        return name == "long" and self.long or None

    def __repr__(self):
        return self.name


def shares(items, workers):
    """Worksteal's first hand-out: worker i takes len(pending) // (workers left) from the front."""
    pending, out = list(items), []
    for i in range(workers):
        size = len(pending) // (workers - i)
        out.append(pending[:size])
        del pending[:size]
    return out


def test_each_worker_starts_with_its_turn_of_the_long_tests_and_the_rest_keep_their_order():
    items = [Item(f"t{n}", long=n in (3, 9, 10, 17, 20)) for n in range(23)]
    ordered = long_first(items, 3)
    assert sorted(ordered, key=items.index) == items  # every test once
    first = shares(ordered, 3)
    assert [[i.name for i in share if i.long] for share in first] == [["t3", "t17"], ["t9", "t20"], ["t10"]]
    for share in first:
        longs = sum(i.long for i in share)
        assert all(i.long for i in share[:longs])  # at its head
    rest = [i for i in ordered if not i.long]
    assert rest == [i for i in items if not i.long]


def test_more_long_tests_than_a_share_holds_loses_none():
    items = [Item(f"t{n}", long=n < 5) for n in range(6)]
    ordered = long_first(items, 3)
    assert sorted(ordered, key=items.index) == items
    assert [i.name for i in ordered[:3]] == ["t0", "t3", "t1"]  # the first share: its two, then the next one's
