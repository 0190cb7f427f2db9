"""per_sample.py: the caller's per-sample numbers (costs, workloads) read whole, once, or
refused by name; whatever reading them raises becomes the rank's error record (issue 30,
item 6). The distributed side, every rank raising alike, is tests/distributed/test_options.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from seqlen_balancing.errors import (
    CallerDataRaised,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    NegativeLength,
)
from seqlen_balancing.planning.per_sample import read_numbers


@pytest.mark.parametrize(
    ("values", "shown"),
    [({0: 9, 1: 9}, "dict"), ({3, 5}, "set"), (frozenset({3}), "frozenset"), ("35", "str"),
     (b"35", "bytes"), (iter([3, 5]), "list_iterator"), (5, "int"), (None, "NoneType")],
)
def test_a_mapping_a_set_a_string_or_a_non_sequence_is_refused_by_name(values: Any, shown: str) -> None:
    error, numbers = read_numbers(values, "costs")
    assert isinstance(error, LengthsNotASequence) and numbers == []
    assert error.message().startswith("costs must be a sequence of whole numbers of tokens")
    assert error.message().endswith(f"got a value of type {shown}")


def test_sequences_and_one_dimensional_arrays_are_read_as_python_ints() -> None:
    assert read_numbers([3, 0, 5], "costs") == (None, [3, 0, 5])
    assert read_numbers((3, 5), "workloads") == (None, [3, 5])
    error, numbers = read_numbers(np.array([7, 2], dtype=np.int32), "costs")
    assert error is None and numbers == [7, 2] and all(type(n) is int for n in numbers)
    error, _ = read_numbers(np.array([[1, 2]]), "costs")
    assert isinstance(error, LengthsNotOneDimensional) and error.detail == "shape (1, 2)"


@pytest.mark.parametrize(
    ("values", "record", "message"),
    [([1, -2], NegativeLength, "costs[1] is -2; costs must be >= 0 tokens"),
     ([1, 2.5], LengthNotAnInteger,
      "costs[1] is not an integer; costs are whole numbers of tokens (2.5 (float))"),
     ([4, "3"], LengthNotAnInteger, "costs[1] is not an integer")],
)
def test_each_value_is_checked_and_the_first_bad_one_named(values: Any, record: type, message: str) -> None:
    error, numbers = read_numbers(values, "costs")
    assert isinstance(error, record) and numbers == []
    assert error.message().startswith(message)


def test_a_callable_is_called_with_the_lengths_and_its_result_read_in_full() -> None:
    calls: list[list[int]] = []

    def doubled(lengths: list[int]) -> Any:
        calls.append(lengths)
        return (2 * n for n in lengths)  # a generator: read whole because a callable returned it

    assert read_numbers(doubled, "workloads", [3, 4]) == (None, [6, 8])
    assert calls == [[3, 4]]
    # without lengths a callable is not called: it is not a sequence
    assert isinstance(read_numbers(doubled, "workloads")[0], LengthsNotASequence)


def test_whatever_reading_raises_becomes_the_ranks_error_naming_the_option_and_the_type() -> None:
    table = {3: 30}
    error, numbers = read_numbers(lambda lengths: map(table.__getitem__, lengths),
                                  "workloads", [3, 4])
    assert isinstance(error, CallerDataRaised) and numbers == []
    assert error.message().startswith("reading workloads raised KeyError: ")
    assert error.detail == "KeyError(4) (KeyError)"

    class Raising:
        def __iter__(self) -> Any:
            raise RuntimeError("storage gone")

    # given as costs, an iterable that is no sequence is refused before it is iterated ...
    assert isinstance(read_numbers(Raising(), "costs")[0], LengthsNotASequence)
    # ... and returned by a callable it is iterated in full, and what it raises is recorded
    error, _ = read_numbers(lambda lengths: Raising(), "costs", [1, 2])
    assert isinstance(error, CallerDataRaised)
    assert error.message().startswith("reading costs raised RuntimeError: ")
    assert error.detail == "RuntimeError('storage gone') (RuntimeError)"
