"""Every mirrored name has verl 0.9.1's parameters: names, kinds, order and defaults, as a
prefix; anything after them is keyword-only with a default (DESIGN.md: extensions stay out of
verl's way), so every call verl makes is unchanged."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)

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


def assert_extends(ours: object, theirs: object) -> None:
    """verl's parameters are a prefix of ours; each extra one is keyword-only, defaulted."""
    mine, verls = parameters(ours), parameters(theirs)
    assert mine[: len(verls)] == verls
    extras = mine[len(verls) :]
    for name, kind, default in extras:
        assert kind is inspect.Parameter.KEYWORD_ONLY, name
        assert default is not inspect.Parameter.empty, name


#: The extensions each mirrored function adds (issue 21: the cap on what the GPU holds;
#: issue 26: the padded footprint and the sample limit; issue 27: the balance objective,
#: over-cap samples alone, dummy micro-batches).
_COST = ["pad_to_multiple_of", "micro_batch_multiple_of", "costs", "padded",
         "max_samples_per_micro_batch"]
_KEEP_TRAINING = ["workloads", "over_cap", "dummy_micro_batches", "loss_weight_keys"]
EXTENDED = {
    "get_seqlen_balanced_partitions": ["workloads"],
    "rearrange_micro_batches": [*_COST, *_KEEP_TRAINING],
    "prepare_dynamic_batch": [*_COST, *_KEEP_TRAINING],
    "prepare_micro_batches": [*_COST, *_KEEP_TRAINING],
}


@pytest.mark.parametrize("name", MIRRORED)
def test_signature_extends_verl(verl: ModuleType, ours: ModuleType, name: str) -> None:
    assert_extends(getattr(ours, name), getattr(verl, name))
    extras = parameters(getattr(ours, name))[len(parameters(getattr(verl, name))) :]
    assert [p[0] for p in extras] == EXTENDED.get(name, [])


def test_prepare_micro_batches_signature_extends_verl(
    verl_engine_utils_module: ModuleType, ours: ModuleType
) -> None:
    assert_extends(ours.prepare_micro_batches, verl_engine_utils_module.prepare_micro_batches)
    extras = parameters(ours.prepare_micro_batches)[
        len(parameters(verl_engine_utils_module.prepare_micro_batches)) :
    ]
    assert [p[0] for p in extras] == EXTENDED["prepare_micro_batches"]


def test_every_public_verl_function_is_mirrored(verl: ModuleType, ours: ModuleType) -> None:
    public = {
        name
        for name, value in vars(verl).items()
        if inspect.isfunction(value) and value.__module__ == verl.__name__ and not name.startswith("_")
    }
    assert public == set(MIRRORED)
    assert all(name in ours.__all__ for name in public)
