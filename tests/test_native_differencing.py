"""The compiled twin of Karmarkar-Karp (``_native_differencing.c``, issue 33): in use where it
was built (CI builds it everywhere and says so with REQUIRE_NATIVE_TWIN=1), off under
SEQLEN_BALANCING_PURE_PYTHON=1, the same partitions as the Python code and as verl's
method spelled out (tests/oracles.py), and the Python code's answer on every input it
refuses.

The oracle tests of the rooms that call it (test_partition.py, test_plans_unchanged.py, the
differential against verl in tests/compat) run on whichever is in use: CI runs them on the
compiled twin (Python 3.10, 3.11) and on the Python code (Python 3.13, SEQLEN_BALANCING_PURE_PYTHON=1).
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys

import pytest

from oracles import model_karmarkar_karp
from seqlen_balancing import differencing

NATIVE = "seqlen_balancing._native_differencing"


def test_the_compiled_twin_is_in_use_as_the_environment_says() -> None:
    built = importlib.util.find_spec(NATIVE) is not None
    if os.environ.get("REQUIRE_NATIVE_TWIN") == "1":
        assert built, f"{NATIVE} was not built (setup.py; a C compiler is needed)"
    if os.environ.get("SEQLEN_BALANCING_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on"):
        assert differencing._native is None
    else:
        assert (differencing._native is not None) == built


@pytest.mark.slow
def test_the_pure_python_switch_turns_it_off_in_a_fresh_interpreter() -> None:
    code = "from seqlen_balancing import differencing as d; print(d._native is None)"
    for value, off in (("1", True), (" ON ", True), ("yes", True), ("0", False), ("", False), ("off", False)):
        env = {**os.environ, "SEQLEN_BALANCING_PURE_PYTHON": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        built = importlib.util.find_spec(NATIVE) is not None
        assert out.stdout.strip() == str(off or not built), (value, out.stderr)


def _native():  # type: ignore[no-untyped-def]
    return pytest.importorskip(NATIVE, reason="built without a C compiler (CI requires it)")


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
