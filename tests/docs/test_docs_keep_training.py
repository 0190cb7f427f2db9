"""docs/keep-training.md's claims: its example runs, its warning text, numbers and
environment variables are the library's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seqlen_balancing.cost import transformer_workload_coefficients
from seqlen_balancing.errors import MAX_DUMMY_MICRO_BATCHES
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse, over_cap_messages
from seqlen_balancing.verl.switch import options_from_env

PAGE = Path(__file__).resolve().parents[2] / "docs" / "keep-training.md"
TEXT = PAGE.read_text(encoding="utf-8")


@pytest.mark.torch
def test_the_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", TEXT, flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(PAGE), "exec"), {})  # our own page's example


def test_the_warning_text_is_the_librarys() -> None:
    (shown,) = re.findall(r"```text\n\s*(.*?)\n\s*```", TEXT, flags=re.DOTALL)
    result = analyse([5000, 100, 200], 4096, PlanOptions(over_cap="alone"))
    assert over_cap_messages(result, rank=1) == [shown.strip()]


def test_the_numbers_on_the_page() -> None:
    assert f"at most {MAX_DUMMY_MICRO_BATCHES:,} dummies" in TEXT
    for shape, text in (
        ({"hidden_size": 8192, "num_layers": 80}, "`49152*s + s**2`"),
        ({"hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
          "intermediate_size": 28672, "gated_mlp": True}, "`52224*s + s**2`"),
        ({"hidden_size": 4096}, "`24576*s + s**2`"),
    ):
        a, b = transformer_workload_coefficients(**shape)  # type: ignore[arg-type]
        assert b == 1 and f"`{a}*s + s**2`" == text and text in TEXT


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("SEQLEN_BALANCING_OVER_CAP", "alone", {"over_cap": "alone"}),
        ("SEQLEN_BALANCING_DUMMY_MICRO_BATCHES", "true", {"dummy_micro_batches": True}),
        ("SEQLEN_BALANCING_DUMMY_MICRO_BATCHES", "0", {"dummy_micro_batches": False}),
        ("SEQLEN_BALANCING_DUMMY_MICRO_BATCHES", "", {}),
        ("SEQLEN_BALANCING_LOSS_WEIGHT_KEYS", "a, b", {"loss_weight_keys": ("a", "b")}),
        ("SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "16", {"pad_to_multiple_of": 16}),
    ],
)
def test_every_variable_in_the_table_does_what_it_says(variable: str, value: str,
                                                        expected: dict[str, object]) -> None:
    assert f"`{variable}`" in TEXT
    assert options_from_env({variable: value}) == expected


def test_the_workload_model_variable() -> None:
    assert "`SEQLEN_BALANCING_WORKLOAD_MODEL`" in TEXT
    options = options_from_env({"SEQLEN_BALANCING_WORKLOAD_MODEL": "hidden_size=4096"})
    assert options["workload_model"].workloads([10, 1000]) == [24576 * 10 + 100, 24576 * 1000 + 1000**2]
    maybe = "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES='maybe' is not a switch value"
    with pytest.raises(ValueError, match=maybe):
        options_from_env({"SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": "maybe"})


@pytest.mark.torch
def test_a_dummy_copies_the_cheapest_row_under_the_rule_as_the_page_says() -> None:
    """Issue 46: the page says the cheapest row under the rule, not the shortest; with
    ``costs=`` they differ, and on a tie of costs the fewest tokens win."""
    import torch
    from tensordict import TensorDict

    from seqlen_balancing import rearrange_micro_batches

    assert "copy of the rank's cheapest real row" in TEXT and "shortest real row" not in TEXT
    lengths = [6, 2, 4]
    mask = torch.zeros(3, 6, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    batch = TensorDict({"attention_mask": mask, "loss_mask": mask.float()}, batch_size=[3])
    for keywords, copied in (({"costs": [3, 9, 5]}, 0),  # row 0 costs least, though longest
                             ({"pad_to_multiple_of": 8}, 1)):  # every row costs 8: the fewest tokens
        micro_batches, idx = rearrange_micro_batches(batch, 100, num_batches_divided_by=4,
                                                     dummy_micro_batches=True, **keywords)
        assert idx[-1] == [] and micro_batches[-1]["loss_mask"].sum() == 0
        assert micro_batches[-1]["attention_mask"].sum() == lengths[copied], keywords
