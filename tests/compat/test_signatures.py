"""Every mirrored name has verl 0.9.1's parameters: names, kinds, order and defaults."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

pytestmark = pytest.mark.torch  # with torch and verl only (tests/conftest.py)

MIRRORED = [
    "calculate_workload",
    "karmarkar_karp",
    "greedy_partition",
    "get_seqlen_balanced_partitions",
    "log_seqlen_unbalance",
    "ceildiv",
    "roundup_divisible",
    "rearrange_micro_batches",
    "get_reverse_idx",
    "prepare_dynamic_batch",
    "restore_dynamic_batch",
    "get_group_balanced_partitions",
]


def parameters(function: object) -> list[tuple[str, object, object]]:
    # Annotations are left out on purpose: this library's are wider (it accepts tensors,
    # NumPy arrays and lists where verl annotates list[int]) and are strings under
    # `from __future__ import annotations`. Names, kinds, order and defaults are what a
    # caller's code depends on.
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", MIRRORED)
def test_signature_matches_verl(verl: ModuleType, ours: ModuleType, name: str) -> None:
    assert parameters(getattr(ours, name)) == parameters(getattr(verl, name))


def test_prepare_micro_batches_signature_matches_verl(
    verl_engine_utils_module: ModuleType, ours: ModuleType
) -> None:
    assert parameters(ours.prepare_micro_batches) == parameters(
        verl_engine_utils_module.prepare_micro_batches
    )


def test_every_public_verl_function_is_mirrored(verl: ModuleType, ours: ModuleType) -> None:
    public = {
        name
        for name, value in vars(verl).items()
        if inspect.isfunction(value) and value.__module__ == verl.__name__ and not name.startswith("_")
    }
    assert public == set(MIRRORED)
    assert all(name in ours.__all__ for name in public)
