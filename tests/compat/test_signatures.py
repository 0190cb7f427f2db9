"""Every mirrored name has verl 0.9.1's parameters: names, kinds, order and defaults, as a
prefix; anything after them is keyword-only with a default (DESIGN.md: extensions stay out of
verl's way), so every call verl makes is unchanged."""

from __future__ import annotations

import dataclasses
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
    """verl's parameters are a prefix of ours; each extra one is keyword-only, defaulted, but
    a last ``**option_keywords`` (the options by name, :class:`~seqlen_balancing.PlanOptions`)."""
    mine, verls = parameters(ours), parameters(theirs)
    assert mine[: len(verls)] == verls
    extras = mine[len(verls) :]
    if extras and extras[-1][1] is inspect.Parameter.VAR_KEYWORD:
        assert extras[-1][0] == "option_keywords"
        extras = extras[:-1]
    for name, kind, default in extras:
        assert kind is inspect.Parameter.KEYWORD_ONLY, name
        assert default is not inspect.Parameter.empty, name


#: The extensions each mirrored function adds: the options object (issue 30: every option of
#: the plan in one ``options=``, or by name through ``**option_keywords``), and the per-sample
#: data that is not an option (issue 21's costs, issue 27's balance objective, issue 32's
#: group ids and the template of an empty rank's dummies, issue 47's shared prefixes).
_PLANNING = ["options", "costs", "workloads", "group_ids", "dummy_template", "prefix_lengths",
             "option_keywords"]
#: Today's keyword names, each still taken by name (through ``**option_keywords``).
_OPTION_NAMES = ["pad_to_multiple_of", "micro_batch_multiple_of", "padded",
                 "max_samples_per_micro_batch", "over_cap", "dummy_micro_batches",
                 "loss_weight_keys"]
EXTENDED = {
    "get_seqlen_balanced_partitions": ["workloads"],
    "rearrange_micro_batches": _PLANNING,
    "prepare_dynamic_batch": _PLANNING,
    "prepare_micro_batches": _PLANNING,
}


def test_todays_keyword_names_are_options() -> None:
    from seqlen_balancing import PlanOptions
    from seqlen_balancing.options import OptionKeywords

    assert set(_OPTION_NAMES) <= OptionKeywords.__required_keys__ | OptionKeywords.__optional_keys__
    assert set(_OPTION_NAMES) <= {field.name for field in dataclasses.fields(PlanOptions)}


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
