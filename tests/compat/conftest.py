"""Fixtures for the differential tests against verl 0.9.1 (collected only where verl is
installed; see tests/conftest.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # verl warns about engines (megatron, ...) it cannot load
    import verl.utils.seqlen_balancing as verl_module
    import verl.workers.engine.utils as verl_engine_utils

import seqlen_balancing as ours_module

#: Random inputs compared per function (and for the micro-batch order, restore round trips).
RANDOM_INPUTS = 500


@pytest.fixture
def random_inputs() -> int:
    """How many random inputs each comparison runs (issue 9 asks for at least 500)."""
    return RANDOM_INPUTS


@pytest.fixture
def verl(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """verl's ``verl.utils.seqlen_balancing``.

    verl's ``get_device_name()`` reports "cuda" on a CPU build of torch; it is only used for
    the DP collectives, which these single-process tests never reach, but it is patched to
    "cpu" so that no test can touch a CUDA device by accident.
    """
    monkeypatch.setattr(verl_module, "get_device_name", lambda: "cpu")
    return verl_module


@pytest.fixture
def verl_engine_utils_module() -> ModuleType:
    """verl's ``verl.workers.engine.utils`` (home of ``prepare_micro_batches``)."""
    return verl_engine_utils


@pytest.fixture
def ours() -> ModuleType:
    return ours_module


@pytest.fixture
def verl_with_partition(
    verl: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Sequence[Sequence[int]]], Any]:
    """Make verl's planner use a given partition: ``use(plan)`` replaces the Karmarkar-Karp
    call inside verl's ``rearrange_micro_batches`` by one that returns ``plan`` (sample
    indices; turned into group indices when verl asks for groups). verl then runs its own
    cap check, ordering and indexing on it, so the two libraries can be compared on the
    same partition."""

    def use(plan: Sequence[Sequence[int]], force_group_size: int = 1) -> None:
        groups = [sorted({i // force_group_size for i in part}) for part in plan]

        def fixed(seqlen_list: Any, k_partitions: int, equal_size: bool) -> list[list[int]]:
            return [list(part) for part in groups]

        monkeypatch.setattr(verl, "get_seqlen_balanced_partitions", fixed)

    return use
