"""The suite's order under pytest-xdist (tests/scheduling.py): the longest tests measured open the workers' slices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.scheduling import LONGEST_TESTS, longest_first, read_longest, worksteal_slices


def _slices(order: list[str], workers: int) -> list[list[str]]:
    slices, start = [], 0
    for size in worksteal_slices(len(order), workers):
        slices.append(order[start:start + size])
        start += size
    return slices


def test_each_worker_starts_with_a_long_test_longest_first_and_the_rest_keep_their_order():
    names = [f"t{i}" for i in range(30)]
    measured = {"t20": 300.0, "t21": 200.0, "t5": 100.0, "t29": 40.0}
    order = longest_first(names, names, measured, 3)
    slices = _slices(order, 3)
    assert [s[0] for s in slices] == ["t20", "t21", "t5"]
    assert slices[2][:2] == ["t5", "t29"]  # the fourth to the slice with the least measured time
    rest = [n for n in order if n not in measured]
    assert rest == [n for n in names if n not in measured]


@given(st.integers(0, 60), st.integers(1, 5), st.lists(st.integers(0, 59), max_size=20),
       st.randoms(use_true_random=False))
def test_every_test_runs_once_in_any_order(count, workers, listed, rng):
    names = [f"t{i}" for i in range(count)]
    measured = {f"t{i}": rng.uniform(1, 300) for i in listed}
    order = longest_first(names, names, measured, workers)
    assert sorted(order) == sorted(names)
    if workers > 1:  # within each slice, the measured ones come first, longest first
        for piece in _slices(order, workers):
            head = [n for n in piece if n in measured]
            assert piece[:len(head)] == head
            assert [measured[n] for n in head] == sorted((measured[n] for n in head), reverse=True)


def test_without_xdist_the_order_is_collection_order():
    names = ["a", "b", "c"]
    assert longest_first(names, names, {"c": 100.0}, 0) == names


def test_the_slices_are_the_ones_worksteal_gives_first():
    assert worksteal_slices(10, 3) == [3, 3, 4]
    assert worksteal_slices(1541, 3) == [513, 514, 514]
    assert sum(worksteal_slices(7, 4)) == 7


def test_the_list_of_longest_tests_reads():
    measured = read_longest(LONGEST_TESTS)
    assert measured and all(seconds > 0 for seconds in measured.values())
    assert all(node_id.startswith("tests/") and "::" in node_id for node_id in measured)
