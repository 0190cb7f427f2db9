"""The transformer cost helper: verl's formula as its 7B case, and the FLOPs count it
reduces, rebuilt here matrix by matrix (Kaplan et al. 2020; Narayanan et al. 2021)."""

from __future__ import annotations

import math
import random
import re

import pytest

from seqlen_balancing.cost import WorkloadModel, transformer_workload_coefficients, transformer_workloads
from seqlen_balancing.options import PlanOptions


def forward_flops(
    s: int, h: int, layers: int, heads: int = 1, kv_heads: int | None = None,
    head_dim: int | None = None, mlp: int | None = None, gated: bool = False,
    experts: int = 1, vocab: int = 0, causal: bool = False,
) -> int:
    """Forward FLOPs of one sequence of ``s`` tokens, two per multiply-add, written out by
    the shapes of the matrices each token meets."""
    d = head_dim if head_dim is not None else h // heads
    q, kv = heads * d, (kv_heads if kv_heads is not None else heads) * d
    f = mlp if mlp is not None else 4 * h
    matrices = [(h, q), (h, kv), (h, kv), (q, h)]  # query, key, value, output
    matrices += [(h, f)] * ((3 if gated else 2) * experts)
    per_token = sum(2 * rows * cols for rows, cols in matrices)
    pairs = s * (s + 1) // 2 if causal else s * s
    scores = 2 * q * pairs + 2 * q * pairs  # Q K^T, then the weights times V
    return layers * (per_token * s + scores) + 2 * h * vocab * s


def test_verl_formula_is_the_7b_case_exactly() -> None:
    lengths = [0, 1, 2, 7, 1000, 4096, 32768, 10**6, 2**31]
    assert transformer_workloads(lengths, hidden_size=4096) == [24576 * s + s**2 for s in lengths]
    for layers in (1, 32, 80):  # layers cancel without an output layer
        assert transformer_workload_coefficients(4096, layers) == (24576, 1)


def test_70b_linear_term_is_twice_verls() -> None:
    assert transformer_workload_coefficients(8192, 80) == (2 * 24576, 1)


@pytest.mark.parametrize("seed", range(3))
def test_coefficients_are_the_flops_reduced(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        heads = rng.choice([1, 8, 32, 64])
        shape = {
            "hidden_size": heads * rng.choice([16, 64, 128]),
            "num_layers": rng.randint(1, 96),
            "num_attention_heads": heads,
            "num_key_value_heads": rng.choice([None, 1, heads]),
            "intermediate_size": rng.choice([None, 1000, 28672]),
            "gated_mlp": rng.random() < 0.5,
            "experts_per_token": rng.choice([1, 2, 8]),
            "vocab_size": rng.choice([0, 32000, 151936]),
            "causal": rng.random() < 0.5,
        }
        a, b = transformer_workload_coefficients(**shape)
        assert a > 0 and b > 0
        flops = [forward_flops(s, shape["hidden_size"], shape["num_layers"], heads,
                               shape["num_key_value_heads"], None, shape["intermediate_size"],
                               shape["gated_mlp"], shape["experts_per_token"],
                               shape["vocab_size"], shape["causal"]) for s in (1, 2, 3, 517)]
        unit = flops[0] // (a + b)
        assert unit * (a + b) == flops[0]
        assert [unit * (a * s + b * s * s) for s in (1, 2, 3, 517)] == flops
        # Reduced: no common factor left.
        assert math.gcd(a, b) == 1


def test_llama_70b_shape() -> None:
    a, b = transformer_workload_coefficients(8192, 80, num_attention_heads=64,
                                             num_key_value_heads=8, intermediate_size=28672,
                                             gated_mlp=True)
    # 8192 (Q, O) + 1024 (K, V) + 1.5 * 28672 (gated MLP) per unit of 4 * 8192 FLOPs
    assert (a, b) == (8192 + 1024 + 43008, 1)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"hidden_size": 0}, ValueError, "hidden_size must be a positive integer (>= 1), got 0"),
        ({"hidden_size": 4096.0}, TypeError, "hidden_size must be a positive integer"),
        ({"hidden_size": 100, "num_attention_heads": 3}, ValueError, "pass head_dim"),
        ({"hidden_size": 64, "gated_mlp": 1}, TypeError, "gated_mlp must be a bool"),
        ({"hidden_size": 64, "vocab_size": -1}, ValueError, "vocab_size must be a positive"),
    ],
)
def test_bad_shapes(kwargs: dict[str, object], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as caught:
        transformer_workload_coefficients(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


def test_unknown_model_argument() -> None:
    with pytest.raises(TypeError, match="unknown model argument"):
        transformer_workloads([1], hidden_size=64, layers=2)


def test_model_from_env() -> None:
    env = {"SEQLEN_BALANCING_WORKLOAD_MODEL": " hidden_size=8192, num_layers=80,gated_mlp=true "}
    model = PlanOptions.from_env(env).workload_model
    assert model == WorkloadModel(hidden_size=8192, num_layers=80, gated_mlp=True)
    assert model is not None and model.shape() == {"hidden_size": 8192, "num_layers": 80, "gated_mlp": True}
    assert str(model) == "hidden_size=8192,num_layers=80,gated_mlp=true"
    assert WorkloadModel.parse(str(model)) == model
    assert PlanOptions.from_env({}).workload_model is None
    for text, fragment in (("hidden=1", "is not key=value"), ("hidden_size=x", "must be an integer"),
                           ("hidden_size=0", "hidden_size must be a positive"),
                           ("hidden_size=64,causal=maybe", "causal must be true or false")):
        with pytest.raises(ValueError, match=re.escape(fragment)) as caught:
            PlanOptions.from_env({"SEQLEN_BALANCING_WORKLOAD_MODEL": text})
        assert str(caught.value).startswith(f"SEQLEN_BALANCING_WORKLOAD_MODEL={text!r} is not accepted")
