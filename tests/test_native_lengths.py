"""The compiled twin of the mask's count (issue 33; batch/_c_lengths.c, seqlen_balancing.native):
the non-zero entries per row of a CPU mask of bools or integers, as ``mask != 0`` counts
them. In use where built (CI requires it, REQUIRE_NATIVE_TWIN=1), off under
SEQLEN_BALANCING_PURE_PYTHON=1; each test here runs the twin and the Python code
(``numpy.count_nonzero``) against torch's own ``(mask != 0).sum(-1)``, the oracle.
"""

from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from seqlen_balancing.batch import lengths

pytestmark = pytest.mark.torch

NAME = "seqlen_balancing.batch._c_lengths"
#: every dtype numpy holds that the twin takes, then those it refuses
TAKEN = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
REFUSED = (torch.float16, torch.float32, torch.float64)
PURE = os.environ.get("SEQLEN_BALANCING_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on")


def _twin():  # type: ignore[no-untyped-def]
    return pytest.importorskip(NAME, reason="built without a C compiler (CI requires it)").row_counts


def _oracle(mask: torch.Tensor) -> list[int]:
    counts: list[int] = (mask != 0).sum(-1).tolist()
    return counts


def _random_mask(rng: random.Random, dtype: torch.dtype, rows: int, width: int) -> torch.Tensor:
    """Values that test each byte: zeros, ones, and values whose low bytes are zero
    (256, 2**16, 2**32, the sign bit), left-, right- and hole-padded rows."""
    bits = torch.iinfo(dtype).bits if dtype != torch.bool else 8
    specials = [1, 2, 255, -(1 << (bits - 1))] + [1 << shift for shift in (8, 16, 32) if shift < bits]
    mask = torch.zeros(rows, width, dtype=torch.int64)
    for r in range(rows):
        real = rng.randint(0, width)
        start = rng.choice([0, width - real, rng.randint(0, width - real)])
        mask[r, start : start + real] = rng.choice(specials)
        for _ in range(rng.randint(0, 3) if width else 0):  # holes and strays
            mask[r, rng.randrange(width)] = rng.choice([0, *specials])
    if dtype == torch.bool:  # bytes other than 0 and 1 stored as bools (a uint8 view)
        return mask.clamp(0, 255).to(torch.uint8).view(torch.bool)
    return mask.to(dtype)  # wraps in the narrower dtypes: the twin must count the wrapped bits


def test_the_twin_is_in_use_as_the_environment_says() -> None:
    built = importlib.util.find_spec(NAME) is not None
    if os.environ.get("REQUIRE_NATIVE_TWIN") == "1":
        assert built, f"{NAME} was not built (setup.py; a C compiler is needed)"
    native = lengths._row_counts.native
    assert (native is not None) == (built and not PURE)
    assert native is None or native is importlib.import_module(NAME).row_counts


def test_a_twin_built_in_place_is_not_older_than_its_source() -> None:
    spec = importlib.util.find_spec(NAME)
    if spec is None or spec.origin is None:
        return  # not built: the Python code counts (and CI fails above)
    built = Path(spec.origin)
    source = built.parent / "_c_lengths.c"
    if not source.exists():
        return  # an install (a wheel): nothing to go stale
    assert source.stat().st_mtime <= built.stat().st_mtime, "run `pip install -e .` again"


@pytest.mark.parametrize("dtype", TAKEN, ids=str)
def test_the_twin_counts_as_torch_and_numpy_do(dtype: torch.dtype) -> None:
    twin, rng = _twin(), random.Random(str(dtype))
    # widths across the twin's blocks: 16 lanes, 255 groups of them (4,080 bytes)
    widths = [0, 1, 15, 16, 17, 255, 1023, 1024, 4079, 4080, 4081, 8161, rng.randint(1, 9000)]
    for width in widths:
        mask = _random_mask(rng, dtype, rng.randint(1, 9), width)
        host = mask.numpy()
        expected = _oracle(mask)
        assert twin(host) == expected, (dtype, width)
        assert lengths._row_counts.python(host) == expected, (dtype, width)
        assert lengths._mask_row_counts(mask) == expected, (dtype, width)


def test_rows_apart_and_repeated_are_read_at_their_stride() -> None:
    twin, rng = _twin(), random.Random(7)
    wide = _random_mask(rng, torch.int32, 6, 300)
    for view in (wide[:, 5:290], wide[::2, 1:], wide[:1].expand(4, 300), wide[2:3, :0]):
        assert twin(view.numpy()) == _oracle(view), view.stride()
        assert lengths._mask_row_counts(view) == _oracle(view)


@pytest.mark.parametrize(
    "given",
    [
        *(torch.ones(2, 3, dtype=dtype).numpy() for dtype in REFUSED),  # -0.0 is zero: numpy counts
        torch.ones(3, 2, dtype=torch.int64).numpy().T,  # items apart within a row
        np.ones(5, dtype=np.int64),
        np.ones((2, 2, 2), dtype=np.uint8),
        np.ones((2, 2), dtype=np.complex64),
        np.ones((2, 2), dtype=object),
        [[1, 0], [1, 1]],
        b"\x01\x00",
    ],
    ids=["float16", "float32", "float64", "transposed", "1-D", "3-D", "complex", "object", "list", "bytes"],
)
def test_what_the_twin_does_not_take_is_left_to_numpy(given: object) -> None:
    assert _twin()(given) is NotImplemented


def test_more_rows_than_a_count_array_holds_are_left_to_numpy() -> None:
    # one row repeated by a stride of 0: the twin's count array would overflow its size
    # (a crash, found by a helper); numpy says the array is too big, and so does the dispatch
    rows = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=bool), (2**61 + 1, 1), (0, 0))
    assert _twin()(rows) is NotImplemented
    with pytest.raises(ValueError, match="too big"):
        lengths._row_counts(rows)
    assert _twin()(rows[: 2**20]) == [0] * 2**20  # a million repeated rows are counted


def test_a_float_mask_is_counted_by_numpy_through_the_dispatch() -> None:
    mask = torch.tensor([[1.0, -0.0, 0.5, float("nan")], [0.0, 0.0, 0.0, 2.0]])
    assert lengths._row_counts(mask.numpy()) == _oracle(mask) == [3, 1]
