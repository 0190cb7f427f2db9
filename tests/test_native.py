"""The compiled twins of the planning loops (issue 33; seqlen_balancing.native): Karmarkar-Karp
(``_c_differencing.c``), best fit decreasing on sorted rooms (``_c_packing.c``) and
LPT on plain sums (``_c_balance.c``). In use where built (CI builds them everywhere and
says so with REQUIRE_NATIVE_TWIN=1), off under SEQLEN_BALANCING_PURE_PYTHON=1; each gives
what its Python code gives and what the rule spelled out gives (tests/oracles.py,
tests/test_plans_unchanged.py's references), and each refused input is the Python code's.

The oracle tests of the rooms that call them (test_partition.py, test_plans_unchanged.py,
test_packing.py, test_balance.py, the differential against verl in tests/compat) run on
whichever is in use: CI runs them on the twins (Python 3.10, 3.11) and on the Python code
(Python 3.13, SEQLEN_BALANCING_PURE_PYTHON=1).
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from oracles import model_karmarkar_karp
from seqlen_balancing.planning import balance, differencing, packing
from seqlen_balancing.planning.rule import Rule
from test_plans_unchanged import reference_best_fit, reference_lpt

NATIVE = "seqlen_balancing._c_differencing"
SOURCES = Path(__file__).resolve().parents[1] / "src" / "seqlen_balancing"
TWINS = {  # module.function: (the room, its Twinned)
    "_c_differencing.differencing": (differencing, "_differencing"),
    "_c_packing.best_fit_sorted": (packing, "_best_fit_sorted"),
    "_c_packing.best_fit_rooms": (packing, "_best_fit_rooms"),
    "_c_balance.lpt_plain": (balance, "_lpt_plain"),
}
MODULES = sorted({twin.split(".")[0] for twin in TWINS})


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_the_compiled_twins_are_in_use_as_the_environment_says(twin: str) -> None:
    name, function = twin.split(".")
    built = importlib.util.find_spec(f"seqlen_balancing.{name}") is not None
    room, twinned = TWINS[twin]
    native = getattr(room, twinned).native
    if os.environ.get("REQUIRE_NATIVE_TWIN") == "1":
        assert built, f"seqlen_balancing.{name} was not built (setup.py; a C compiler is needed)"
    if os.environ.get("SEQLEN_BALANCING_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on"):
        assert native is None
    else:
        assert (native is not None) == built
        module = importlib.import_module(f"seqlen_balancing.{name}") if built else None
        assert native is None or native is getattr(module, function)


def test_in_use_names_each_twinned_loop_and_whether_its_twin_runs() -> None:
    from seqlen_balancing import native

    expected = {twin: getattr(room, twinned).native is not None for twin, (room, twinned) in TWINS.items()}
    lengths = sys.modules.get("seqlen_balancing.batch.lengths")  # imported with torch
    if lengths is not None:  # (its twin: tests/test_native_lengths.py)
        expected["batch._c_lengths.row_counts"] = lengths._row_counts.native is not None
    assert native.in_use() == expected
    pure = os.environ.get("SEQLEN_BALANCING_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on")
    built = all(importlib.util.find_spec(f"seqlen_balancing.{module}") for module in MODULES)
    assert set(native.in_use().values()) == {built and not pure}


@pytest.mark.parametrize("name", MODULES)
def test_a_twin_built_in_place_is_not_older_than_its_source(name: str) -> None:
    # `pip install -e .` builds the twins into src/ once: after an edit of a .c file a test
    # run would use the old build, unless this fails and says to build again
    spec = importlib.util.find_spec(f"seqlen_balancing.{name}")
    if spec is None or spec.origin is None:
        return  # not built: the Python code runs (and CI fails above, in its own test)
    built = Path(spec.origin)
    if built.parent != SOURCES:
        return  # an install (a wheel built from the sources): nothing to go stale
    sources = [built.parent / f"{name}.c", built.parent / "_c_ints.h"]
    stamp = built.stat().st_mtime
    newer = [source.name for source in sources if source.exists() and source.stat().st_mtime > stamp]
    assert newer == [], f"{built.name} is older than {newer}: run `pip install -e .` again"


@pytest.mark.slow
def test_the_pure_python_switch_turns_it_off_in_a_fresh_interpreter() -> None:
    code = (
        "from seqlen_balancing.planning import balance as b, differencing as d, packing as p;"
        "print(all(f.native is None for f in (b._lpt_plain, d._differencing, p._best_fit_sorted, "
        "p._best_fit_rooms)))"
    )
    for value, off in (("1", True), (" ON ", True), ("yes", True), ("0", False), ("", False), ("off", False)):
        env = {**os.environ, "SEQLEN_BALANCING_PURE_PYTHON": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        built = importlib.util.find_spec(NATIVE) is not None
        assert out.stdout.strip() == str(off or not built), (value, out.stderr)


def test_int_subclasses_and_bools_are_refused_by_the_differencing_twin() -> None:
    assert _native().differencing([5, Shifty(4)], 2, False, None, 0) is NotImplemented
    assert _native().differencing([5, 4], 2, False, [True, 1], 3) is NotImplemented
    assert differencing._differencing([5, True, 3], 2, False, None, 0) == (
        differencing._differencing_python([5, True, 3], 2, False, None, 0))


def test_counts_past_the_limit_are_refused() -> None:
    # (the Python code would make that many empty lists: not run here)
    assert _native().differencing([5, 4], 2**63, False, None, 0) is NotImplemented
    lpt_plain = _native("seqlen_balancing._c_balance").lpt_plain
    assert lpt_plain([3, 2], 8, [9, 4], 2**63, [0, 1], 100) is NotImplemented


class Shifty(int):
    """An int that shifts to 0 and is never greater than anything."""

    def __rshift__(self, other: object) -> int:
        return 0

    def __gt__(self, other: object) -> bool:
        return False


class Tenfold(list):  # type: ignore[type-arg]
    """A list whose items read ten times what it holds."""

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return 10 * list.__getitem__(self, index)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (10 * value for value in list.__iter__(self))


def _native(name: str = NATIVE):  # type: ignore[no-untyped-def]
    return pytest.importorskip(name, reason="built without a C compiler (CI requires it)")


def _draw(rng: random.Random) -> tuple[list[int], int, bool, list[int] | None, int]:
    n = rng.randint(1, 2500)
    k = rng.choice([1, 2, 3, rng.randint(1, 300), n, n + 5])
    kind = rng.random()
    if kind < 0.5:
        sizes = [max(0, min(32768, int(rng.lognormvariate(6.9, 1.2)))) for _ in range(n)]
        values = [24576 * s + s * s for s in sizes]
    elif kind < 0.7:  # every byte of a 64-bit value in play (the twin sorts byte by byte)
        sizes = [rng.randint(0, 4096) for _ in range(n)]
        values = [rng.randint(0, 2**50) for _ in range(n)]
    else:
        sizes = [rng.randint(0, 3) for _ in range(n)]
        values = [rng.choice([0, 7, 7, 100]) for _ in range(n)]  # ties everywhere
    if rng.random() < 0.5:
        cap = max(max(sizes), -(-sum(sizes) // k) + rng.choice([0, 1, 64, 4096, 10**5]))
        return values, k, False, sizes, cap
    return values, k, rng.random() < 0.4, None, 0


def test_the_same_partitions_as_the_python_code_on_random_batches() -> None:
    native = _native()
    kinds = {"fits": 0, "over": 0, "equal_size": 0}
    for seed in range(300):
        args = _draw(random.Random(seed))
        found = native.differencing(*args)
        assert found is not NotImplemented, seed
        assert found == differencing._differencing_python(*args), seed
        kinds["over" if found is None else "fits"] += 1
        kinds["equal_size"] += args[2]
    assert min(kinds.values()) > 30, kinds


def test_the_same_partitions_as_verls_method_spelled_out() -> None:
    native = _native()
    for seed in range(200):
        rng = random.Random(seed)
        k = rng.randint(1, 9)
        equal = seed % 3 == 0
        n = k * rng.randint(1, 10) if equal else rng.randint(1, 70)
        values = [rng.randint(0, rng.choice([2, 50, 10**9, 2**55])) for _ in range(n)]
        assert native.differencing(values, k, equal, None, 0) == model_karmarkar_karp(values, k, equal), seed


def test_a_part_one_token_over_the_cap_stops_it() -> None:
    native = _native()
    # two items of 3 tokens into one part: 6 tokens; fits at 6, over at 5
    assert native.differencing([9, 9], 1, False, [3, 3], 6) == [[1, 0]]
    assert native.differencing([9, 9], 1, False, [3, 3], 5) is None
    # four equal items into 2 parts: (3, 2) and (1, 0) pair up largest with smallest, 2 tokens each
    assert native.differencing([1] * 4, 2, False, [1] * 4, 2) == [[3, 0], [2, 1]]


@pytest.mark.parametrize(
    ("values", "k", "sizes", "cap"),
    [
        ([2**62, 1], 2, None, 0),  # a value past 2**62
        ([2**61, 2**61], 2, None, 0),  # a sum past it
        ([3, -1, 2], 2, None, 0),  # a negative value
        ([1.5, 2], 2, None, 0),  # not an int
        ((4, 2, 1), 2, None, 0),  # not a list
        ([1, 2], 0, None, 0),  # no part
        ([5, 4], 1, [3, 1], 2),  # an item over the cap alone
        ([5, 4], 2, [1, 1], 2**61),  # a cap past 2**61
        (Tenfold([5, 4]), 2, None, 0),  # a list subclass (it may read its items otherwise)
    ],
)
def test_inputs_it_refuses_are_the_python_codes(
    values: list[int], k: int, sizes: list[int] | None, cap: int
) -> None:
    native = _native()
    assert native.differencing(values, k, False, sizes, cap) is NotImplemented
    try:
        expected: object = differencing._differencing_python(values, k, False, sizes, cap)
    except Exception as error:  # whatever the Python code does, the dispatch does too
        with pytest.raises(type(error)):
            differencing._differencing(values, k, False, sizes, cap)
        return
    assert differencing._differencing(values, k, False, sizes, cap) == expected


# ----------------------------------------------------------------------------- best fit, LPT


def _lengths(rng: random.Random, n: int, cap: int) -> list[int]:
    kind = rng.randrange(4)
    if kind == 0:
        return [min(cap, int(rng.lognormvariate(4, 1.5))) for _ in range(n)]
    if kind == 1:
        return [rng.randint(0, cap) for _ in range(n)]
    if kind == 2:  # equal sizes and zeros: the ties of both rules
        return [rng.choice([0, cap // 3, cap // 3, cap // 2]) for _ in range(n)]
    return [rng.choice([rng.randint(1, cap // 8 + 1), rng.randint(cap // 3, cap)]) for _ in range(n)]


def _falling(sizes: list[int]) -> list[int]:
    return sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))


def test_best_fit_twin_is_the_python_code_and_the_rule_spelled_out() -> None:
    native = _native("seqlen_balancing._c_packing")
    for seed in range(400):
        rng = random.Random(seed)
        cap = rng.choice([1, 5, 64, 1000, 65536, 2**40])
        sizes = _lengths(rng, rng.randint(0, 300), cap)
        found = native.best_fit_sorted(sizes, cap, _falling(sizes))
        assert found == packing._best_fit_sorted_python(sizes, cap, _falling(sizes)), seed
        if seed % 4 == 0:  # the reference is quadratic
            assert found == reference_best_fit(sizes, cap), seed


def test_best_fit_by_rooms_twin_is_the_python_code_and_the_rule_spelled_out() -> None:
    # many bins (the bitmap's path), rooms around its 64-room words, ties and zeros
    native = _native("seqlen_balancing._c_packing")
    for seed in range(400):
        rng = random.Random(seed)
        cap = rng.choice([1, 5, 63, 64, 65, 4095, 4096, 4097, 65536, packing._BITMAP_CAP])
        sizes = _lengths(rng, rng.randint(0, 300), cap)
        found = native.best_fit_rooms(sizes, cap, _falling(sizes))
        assert found == packing._best_fit_rooms_python(sizes, cap, _falling(sizes)), seed
        if seed % 4 == 0:  # the reference is quadratic
            assert found == reference_best_fit(sizes, cap), seed


@pytest.mark.slow
def test_best_fit_by_rooms_places_a_large_batch_as_the_python_code_does() -> None:
    # a batch of the kind it runs on: 2 x 10^5 samples into ~2 x 10^4 bins, every room in play
    rng = random.Random(1)
    sizes = [max(1, min(16384, int(rng.lognormvariate(6.9, 1)))) for _ in range(200_000)]
    order = _falling(sizes)
    found = _native("seqlen_balancing._c_packing").best_fit_rooms(sizes, 16384, order)
    assert found == packing._best_fit_rooms_python(sizes, 16384, order)
    assert len(found) > packing._SORTED_BINS // 4


def _lpt_case(rng: random.Random) -> tuple[list[int], int, list[int], int, list[int], int]:
    cap = rng.choice([5, 64, 1000, 65536])
    sizes = _lengths(rng, rng.randint(0, 200), cap)
    workloads = [24576 * s + s * s for s in sizes]  # fall along the sizes, as verl's do
    lower = max(1, -(-sum(sizes) // cap))
    count = rng.choice([lower, lower + 1, lower + rng.randint(0, 6), max(1, len(sizes))])
    budget = 8 * len(sizes) + 4096 if rng.random() < 0.7 else rng.randint(0, 40)
    return sizes, cap, workloads, count, _falling(sizes), budget


def test_lpt_twin_is_the_python_code_and_the_rule_spelled_out() -> None:
    native = _native("seqlen_balancing._c_balance")
    outcomes = {"fits": 0, "gives up": 0}
    for seed in range(600):
        args = _lpt_case(random.Random(seed))
        found = native.lpt_plain(*args)
        assert found == balance._lpt_plain_python(*args), seed
        outcomes["gives up" if found is None else "fits"] += 1
        sizes, cap, workloads, count, _, budget = args
        if budget == 8 * len(sizes) + 4096:  # the reference's own budget
            assert found == reference_lpt(Rule.sums(sizes, cap), workloads, count), seed
    assert min(outcomes.values()) > 100, outcomes


def test_lpt_twin_gives_up_at_the_skip_where_the_budget_runs_out() -> None:
    native = _native("seqlen_balancing._c_balance")
    # sizes 6, 5, 5, 4 (workloads 6, 1, 1, 1) at cap 10 into 2: 6 -> bin 0 (room 4); 5 -> bin 1
    # (room 5, load 1); 5 -> bin 1, the lighter (room 0, load 2); 4: bin 1 is lighter but
    # has no room, so it is skipped (1 skip) and 4 goes to bin 0
    sizes, workloads, order = [6, 5, 5, 4], [6, 1, 1, 1], [0, 1, 2, 3]
    assert native.lpt_plain(sizes, 10, workloads, 2, order, 1) == [[0, 3], [1, 2]]
    assert native.lpt_plain(sizes, 10, workloads, 2, order, 0) is None
    # into 3: the second 5 takes the empty bin 2; 4 then ties bins 1 and 2 (load 1, one item)
    # and takes bin 1, the lower index, with room 5: no skip
    assert native.lpt_plain(sizes, 10, workloads, 3, order, 0) == [[0], [1, 3], [2]]
    # into 2 at cap 9: 4 fits no bin (rooms 3 and 0): None whatever the budget
    assert native.lpt_plain(sizes, 9, workloads, 2, order, 10**6) is None


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("best_fit_sorted", ([5, 2], 4, [0, 1])),  # an item over the cap: the Python code raises
        ("best_fit_sorted", ([5, 2**62], 2**63, [1, 0])),  # a size past 2**62
        ("best_fit_sorted", ([5, 2], 8, [1, 2])),  # an order that names no item
        ("best_fit_sorted", ((5, 2), 8, [0, 1])),  # not a list
        ("lpt_plain", ([3, 2], 8, [2**62, 1], 2, [0, 1], 100)),  # a workload past 2**62
        ("lpt_plain", ([3, 2], 8, [9, 4], 0, [0, 1], 100)),  # no micro-batch
        ("lpt_plain", ([3, 2], 8, [9, 4], 2, [0, 1], 2**64)),  # a budget past 2**62
        ("lpt_plain", ([3, 2.0], 8, [9, 4], 2, [0, 1], 100)),  # not an int
        ("lpt_plain", ([1, 1], 100, [1, 0], 2, [0, 1, 1], 100)),  # an order naming an item twice
        ("best_fit_sorted", ([1, 2], 5, [True, False])),  # an order of bools (they come back)
        ("best_fit_sorted", (Tenfold([3, 2, 2]), 100, [0, 1, 2])),  # a list subclass
        ("best_fit_rooms", ([5, 2], 4, [0, 1])),  # an item over the cap: the Python code raises
        ("best_fit_rooms", ([5, 2], 2**22 + 1, [0, 1])),  # a cap past the bitmap's
        ("best_fit_rooms", ([5, 2], 8, [1, 1])),  # an order naming an item twice
        ("best_fit_rooms", ((5, 2), 8, [0, 1])),  # not a list
        # int subclasses and bools (a subclass may shift and compare otherwise: found by a helper)
        ("best_fit_rooms", ([900, 600, Shifty(300)], 1000, [0, 1, 2])),
        ("best_fit_sorted", ([900, 600, Shifty(300)], 1000, [0, 1, 2])),
        ("best_fit_rooms", ([True, False, True], 2, [0, 2, 1])),
        ("lpt_plain", ([3, 2], Shifty(8), [9, 4], 2, [0, 1], 100)),
    ],
)
def test_inputs_the_twins_refuse_are_the_python_codes(name: str, args: tuple[object, ...]) -> None:
    module, room, python = {
        "best_fit_sorted": ("_c_packing", packing, "_best_fit_sorted_python"),
        "best_fit_rooms": ("_c_packing", packing, "_best_fit_rooms_python"),
        "lpt_plain": ("_c_balance", balance, "_lpt_plain_python"),
    }[name]
    native = _native(f"seqlen_balancing.{module}")
    assert getattr(native, name)(*args) is NotImplemented
    dispatch = getattr(room, f"_{name}")
    try:
        expected: object = getattr(room, python)(*args)
    except Exception as error:  # whatever the Python code does, the dispatch does too
        with pytest.raises(type(error), match=str(error)[:20] or None):
            dispatch(*args)
        return
    assert dispatch(*args) == expected
