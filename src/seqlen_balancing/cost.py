"""What a sample and a micro-batch cost on the GPU, in tokens (pure integer arithmetic).

``max_token_len`` is a memory budget. The model does not always hold effective tokens:

* **Per-sequence alignment** (``pad_to_multiple_of = p``): Megatron's packed (THD) input
  pads every sequence to a multiple of ``p``; a sample of ``s`` tokens costs
  ``ceil(s / p) * p`` (:func:`aligned_length`). ``p = 1`` (the default) is verl's rule:
  a sample costs its effective length.
* **Caller-given costs** (``costs``): one non-negative integer per sample, e.g. image plus
  text tokens, or a memory estimate in token units. They replace the effective lengths and
  are rounded up to ``pad_to_multiple_of`` as the lengths would be: **one rule**, a sample
  costs ``ceil(c / p) * p`` for its given cost (or effective length) ``c``.
* **Per-micro-batch rounding** (``micro_batch_multiple_of = b``): verl's
  ``pad_to_length_bucket``, or FP8's total alignment, rounds a packed micro-batch's total
  up to a multiple of ``b`` (:func:`micro_batch_cost`).

The planner holds every micro-batch to ``micro_batch_cost(costs, b) <= max_token_len``.
Since ``ceil(S / b) * b`` is a multiple of ``b``, it is at most ``C`` exactly when it is at
most the largest multiple of ``b`` not above ``C``, that is when ``S <= (C // b) * b``: the
rounding is the same as a usable cap of :func:`micro_batch_capacity` on the plain sum of
the costs, so the packing, the bounds and the agreement run unchanged on (costs, usable
cap). A cap that is not a multiple of ``b`` loses its remainder: ``max_token_len=16400``
with ``b=512`` holds what ``16384`` holds.

Balance is left on the effective lengths: verl's workload ``24576*s + s**2`` models compute
per sequence, and a caller's cost (a memory estimate) says nothing about compute, so the
micro-batches are balanced and ordered exactly as without costs.

* **Padded micro-batches** (``padded=True``): a model that runs padded tensors (verl's
  ``use_remove_padding=False``, most plain PyTorch and TRL loops) holds every row at the
  micro-batch's width, so a micro-batch costs its number of rows times its widest row
  (:func:`padded_micro_batch_cost`), each row's width being its cost (its effective
  length, or the ``costs`` given) rounded up to ``pad_to_multiple_of``. The same one rule
  composes with the others: ``micro_batch_multiple_of`` rounds that footprint up before it
  meets the cap (a usable cap of ``C // b * b`` again).
* **Samples per micro-batch** (``max_samples_per_micro_batch = N``): no micro-batch holds
  more than ``N`` samples (a forced group counts all its samples), with any of the costs
  above.

verl users (the library switched on inside verl) set these once for every process with the
``SEQLEN_BALANCING_*`` environment variables, which
:meth:`~seqlen_balancing.PlanOptions.from_env` reads (docs/options.md).

**Compute cost (the balance objective).** :func:`transformer_workloads` gives a sample's
forward FLOPs from the model's shape (hidden size, layers, heads, MLP width, experts per
token, vocabulary), reduced to the smallest integer coefficients: what ``workloads=``
takes to balance on the caller's model instead of verl's 7B formula, which it reproduces
exactly for ``hidden_size=4096``; :class:`WorkloadModel` is such a shape as one frozen value
(the ``workload_model`` option, ``SEQLEN_BALANCING_WORKLOAD_MODEL`` for a switched verl job).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from seqlen_balancing._checks import as_list, describe, non_negative_ints, positive_int

__all__ = [
    "WorkloadModel",
    "aligned_length",
    "megatron_alignment",
    "micro_batch_capacity",
    "micro_batch_cost",
    "padded_micro_batch_cost",
    "parse_workload_model",
    "sample_costs",
    "transformer_workload_coefficients",
    "transformer_workloads",
]

def aligned_length(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (tokens).

    Args:
        length: tokens, >= 0.
        multiple: the alignment in tokens, >= 1.

    Returns:
        ``ceil(length / multiple) * multiple``; 0 stays 0.

    Complexity: O(1).

    Example:
        >>> aligned_length(250, 32), aligned_length(256, 32), aligned_length(0, 32)
        (256, 256, 0)
    """
    return -(-length // multiple) * multiple


def micro_batch_capacity(max_token_len: int, micro_batch_multiple_of: int = 1) -> int:
    """The cap on a micro-batch's summed sample costs when its total is rounded up to
    ``micro_batch_multiple_of`` before it is compared to ``max_token_len``.

    ``ceil(S / b) * b <= C`` holds exactly when ``S <= (C // b) * b``, so this is the
    usable part of the cap: the rest of a cap that is not a multiple of ``b`` cannot hold
    anything.

    Args:
        max_token_len: the cap in tokens, >= 1.
        micro_batch_multiple_of: the bucket in tokens, >= 1 (1: no rounding).

    Returns:
        ``max_token_len // micro_batch_multiple_of * micro_batch_multiple_of`` tokens (0
        when the bucket is larger than the cap: no micro-batch of positive cost fits).

    Complexity: O(1).

    Example:
        >>> micro_batch_capacity(16384, 512), micro_batch_capacity(16400, 512)
        (16384, 16384)
    """
    return max_token_len // micro_batch_multiple_of * micro_batch_multiple_of


def micro_batch_cost(costs: Sequence[int], micro_batch_multiple_of: int = 1) -> int:
    """What a micro-batch holds on the GPU: its samples' costs summed, rounded up to
    ``micro_batch_multiple_of`` (tokens). The planner keeps this at most ``max_token_len``.

    Args:
        costs: the cost of each sample of the micro-batch in tokens (see
            :func:`sample_costs`).
        micro_batch_multiple_of: the bucket in tokens, >= 1.

    Returns:
        ``ceil(sum(costs) / b) * b`` tokens.

    Complexity: O(len(costs)).

    Example:
        >>> micro_batch_cost([256] * 64, 512), micro_batch_cost([250, 300], 512)
        (16384, 1024)
    """
    return aligned_length(sum(costs), micro_batch_multiple_of)


def padded_micro_batch_cost(
    widths: Sequence[int], pad_to_multiple_of: int = 1, micro_batch_multiple_of: int = 1
) -> int:
    """What a padded micro-batch holds on the GPU (``padded=True``): its number of rows
    times its widest row, each row's width rounded up to ``pad_to_multiple_of`` first, the
    product rounded up to ``micro_batch_multiple_of`` (token positions). The planner keeps
    this at most ``max_token_len``.

    Args:
        widths: each row's width in tokens (its effective length, or its given cost).
        pad_to_multiple_of: per-row alignment in tokens, >= 1.
        micro_batch_multiple_of: the footprint's bucket in token positions, >= 1.

    Returns:
        ``ceil(len(widths) * ceil(max(widths) / p) * p / b) * b`` (0 for no rows).

    Complexity: O(len(widths)).

    Example:
        >>> padded_micro_batch_cost([200] * 80), padded_micro_batch_cost([10, 10, 10])
        (16000, 30)
        >>> padded_micro_batch_cost([100, 10]), padded_micro_batch_cost([250, 3], 32)
        (200, 512)
    """
    width = aligned_length(max(widths, default=0), pad_to_multiple_of)
    return aligned_length(len(widths) * width, micro_batch_multiple_of)


def sample_costs(
    seq_lens: Sequence[int] | Any, *, pad_to_multiple_of: int = 1, costs: Sequence[int] | Any = None
) -> list[int]:
    """The cost of each sample in tokens: the caller's ``costs`` when given, else each
    effective length, rounded up to ``pad_to_multiple_of`` (one rule for both).

    Args:
        seq_lens: effective length of each sample in tokens (list, tuple, NumPy array or
            1-D tensor of non-negative integers).
        pad_to_multiple_of: per-sequence alignment in tokens, >= 1 (1: the cost or length
            itself). It applies to given ``costs`` too: a Megatron THD job pads every
            sequence, whatever the caller counts in it.
        costs: one non-negative integer per sample, or ``None``.

    Returns:
        One int per sample.

    Raises:
        TypeError: a length, a cost or ``pad_to_multiple_of`` is not an integer.
        ValueError: a negative length or cost, ``pad_to_multiple_of < 1``, or ``costs``
            not of the same length as ``seq_lens``.

    Complexity: O(n).

    Example:
        >>> sample_costs([250, 256, 1], pad_to_multiple_of=32)
        [256, 256, 32]
        >>> sample_costs([250, 256], costs=[900, 12])
        [900, 12]
        >>> sample_costs([250, 256], costs=[900, 12], pad_to_multiple_of=8)
        [904, 16]
    """
    pad = positive_int(pad_to_multiple_of, "pad_to_multiple_of")
    values = non_negative_ints(as_list(seq_lens, "seq_lens"), "seq_lens", "lengths")
    if costs is not None:
        given = non_negative_ints(as_list(costs, "costs"), "costs", "costs")
        if len(given) != len(values):
            raise ValueError(
                f"costs has {len(given)} entries but there are {len(values)} samples; give one "
                "cost per sample"
            )
        values = given
    return [aligned_length(c, pad) for c in values] if pad > 1 else values


def megatron_alignment(tp: int, cp: int = 1, fp8: bool = False) -> tuple[int, int]:
    """``(pad_to_multiple_of, micro_batch_multiple_of)`` that verl 0.9.1's Megatron engine
    imposes on packed (THD) sequences.

    verl's rule (``verl.models.mcore.util``, ``preprocess_packed_seqs`` and
    ``preprocess_thd_engine`` with the default zigzag context-parallel layout): every
    sequence is padded to a multiple of ``align = tp * cp * 2`` when ``cp > 1``, else
    ``tp``. With FP8 (``use_fp8_padding``) each sequence is padded to ``lcm(16, align)``
    instead and the packed total to a multiple of ``align * 128`` (the last sequence takes
    the rest). Without FP8 the total needs no rounding (1). Combine the second value with
    verl's ``pad_to_length_bucket`` as ``math.lcm(bucket, it)`` when both apply.

    Args:
        tp: tensor-parallel size, >= 1.
        cp: context-parallel size, >= 1.
        fp8: FP8 block quantization padding.

    Returns:
        ``(pad_to_multiple_of, micro_batch_multiple_of)`` in tokens.

    Raises:
        TypeError: ``tp`` or ``cp`` is not an integer, or ``fp8`` not a bool.
        ValueError: ``tp`` or ``cp`` below 1.

    Complexity: O(1).

    Example:
        >>> megatron_alignment(4, 2), megatron_alignment(8, 1), megatron_alignment(4, 2, fp8=True)
        ((16, 1), (8, 1), (16, 2048))
        >>> megatron_alignment(1, 1, fp8=True)
        (16, 128)
    """
    tp_size = positive_int(tp, "tp")
    cp_size = positive_int(cp, "cp")
    if not isinstance(fp8, bool):
        raise TypeError(f"fp8 must be a bool, got {describe(fp8)}")
    align = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    return (math.lcm(16, align), align * 128) if fp8 else (align, 1)


_MODEL_KEYS = (
    "hidden_size", "num_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "gated_mlp", "experts_per_token", "vocab_size", "causal",
)


def transformer_workload_coefficients(
    hidden_size: int,
    num_layers: int = 1,
    *,
    num_attention_heads: int = 1,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
    gated_mlp: bool = False,
    experts_per_token: int = 1,
    vocab_size: int = 0,
    causal: bool = False,
) -> tuple[int, int]:
    """``(a, b)`` such that a sequence of ``s`` tokens costs ``a*s + b*s**2`` (a workload
    proportional to its forward FLOPs), with ``gcd(a, b) == 1``.

    The count, per layer, in FLOPs (two per multiply-add), following the standard dense
    transformer count of Kaplan et al. (2020) and Narayanan et al. (2021):

    * projections, per token: ``2*h*q`` (query) ``+ 4*h*kv`` (key and value) ``+ 2*q*h``
      (output), with ``q = num_attention_heads * head_dim`` (default ``h``) and
      ``kv = num_key_value_heads * head_dim`` (default ``q``: no grouped-query attention);
    * the MLP, per token: ``2*m*h*f*e`` with ``m = 3`` gated (SwiGLU) or 2, ``f =
      intermediate_size`` (default ``4*h``) and ``e = experts_per_token`` (the active
      experts of a mixture of experts; the router is left out);
    * attention scores and their weighted sum: ``4*q`` per (query, key) pair, ``s**2``
      pairs (``s*(s+1)/2`` with ``causal=True``, for kernels that skip the masked half);

    plus ``2*h*vocab_size`` per token once for the output layer. The backward pass costs
    twice the forward pass term by term (activation recomputation adds one more forward),
    so forward FLOPs rank samples exactly as the training step's FLOPs do. With the
    defaults the count is ``num_layers * (24*h**2*s + 4*h*s**2)``, Narayanan et al.'s,
    and for ``hidden_size=4096`` the reduced form is verl's ``24576*s + s**2``.

    Args:
        hidden_size: the model width ``h`` (e.g. 4096 for a 7B dense model, 8192 for 70B).
        num_layers: transformer blocks (matters only with ``vocab_size``).
        num_attention_heads: query heads (only their ratio to ``num_key_value_heads``
            and ``head_dim`` matter).
        num_key_value_heads: key/value heads (grouped-query attention), default
            ``num_attention_heads``.
        head_dim: per-head width, default ``hidden_size // num_attention_heads``.
        intermediate_size: MLP (per-expert) width, default ``4 * hidden_size``.
        gated_mlp: three MLP matrices (SwiGLU, as Llama and Qwen) instead of two.
        experts_per_token: experts each token runs (top-k of a mixture of experts).
        vocab_size: the output layer's vocabulary (0: not counted).
        causal: count only the unmasked half of the attention pairs.

    Returns:
        ``(a, b)``, positive ints without a common factor.

    Raises:
        TypeError: an argument is not an integer (or a bool for the two switches).
        ValueError: a size below 1 (``vocab_size`` below 0), or ``head_dim`` not given
            where ``hidden_size`` is not a multiple of ``num_attention_heads``.

    Complexity: O(1).

    References:
        J. Kaplan et al., "Scaling Laws for Neural Language Models", 2020 (the forward
        FLOPs per token, ``2N + 2 n_layer n_ctx d_attn``). D. Narayanan et al., "Efficient
        Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC 2021
        (per layer ``24 B s h**2 + 4 B s**2 h`` forward). verl 0.9.1
        ``calculate_workload`` (``24576*s + s**2``, its 7B case).

    Example:
        >>> transformer_workload_coefficients(4096)  # verl's formula
        (24576, 1)
        >>> transformer_workload_coefficients(8192, 80)  # 70B: twice the linear term
        (49152, 1)
        >>> transformer_workload_coefficients(8192, 80, num_attention_heads=64,
        ...     num_key_value_heads=8, intermediate_size=28672, gated_mlp=True)
        (52224, 1)
    """
    h = positive_int(hidden_size, "hidden_size")
    layers = positive_int(num_layers, "num_layers")
    heads = positive_int(num_attention_heads, "num_attention_heads")
    kv_heads = heads if num_key_value_heads is None else positive_int(
        num_key_value_heads, "num_key_value_heads")
    if head_dim is None:
        if h % heads:
            raise ValueError(
                f"hidden_size={h} is not a multiple of num_attention_heads={heads}; pass head_dim"
            )
        width = h // heads
    else:
        width = positive_int(head_dim, "head_dim")
    mlp = 4 * h if intermediate_size is None else positive_int(intermediate_size, "intermediate_size")
    experts = positive_int(experts_per_token, "experts_per_token")
    vocab = 0 if vocab_size == 0 else positive_int(vocab_size, "vocab_size")
    for name, flag in (("gated_mlp", gated_mlp), ("causal", causal)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {describe(flag)}")
    q, kv = heads * width, kv_heads * width
    per_token = 2 * h * q + 4 * h * kv + 2 * q * h + (6 if gated_mlp else 4) * h * mlp * experts
    quadratic = layers * 4 * q // 2 if causal else layers * 4 * q  # causal: s*(s+1)/2 pairs
    linear = layers * per_token + (quadratic if causal else 0) + 2 * h * vocab
    common = math.gcd(linear, quadratic)
    return linear // common, quadratic // common


def transformer_workloads(seq_lens: Sequence[int] | Any, **model: Any) -> list[int]:
    """Each sample's workload ``a*s + b*s**2`` for the model shape given
    (:func:`transformer_workload_coefficients`): what ``workloads=`` takes.

    Args:
        seq_lens: effective length of each sample in tokens (list, tuple, NumPy array or
            1-D tensor of non-negative integers).
        **model: the keyword arguments of :func:`transformer_workload_coefficients`
            (``hidden_size`` required).

    Returns:
        One exact Python int per sample.

    Raises:
        TypeError, ValueError: a bad length, or a bad or unknown model argument.

    Complexity: O(n).

    Example:
        >>> transformer_workloads([1000, 10], hidden_size=4096)  # verl's workloads
        [25576000, 245860]
    """
    unknown = sorted(set(model) - set(_MODEL_KEYS))
    if unknown:
        raise TypeError(
            f"unknown model argument(s) {', '.join(unknown)}; the shape takes "
            f"{', '.join(_MODEL_KEYS)}"
        )
    a, b = transformer_workload_coefficients(**model)
    values = non_negative_ints(as_list(seq_lens, "seq_lens"), "seq_lens", "lengths")
    return [(a + b * s) * s for s in values]


def parse_workload_model(text: str) -> dict[str, Any]:
    """A model shape written as ``key=value`` pairs separated by commas (the keyword
    arguments of :func:`transformer_workload_coefficients`; ``true``/``false`` for the two
    switches), as ``SEQLEN_BALANCING_WORKLOAD_MODEL`` and the command line's ``--workload-model``
    take it (:meth:`WorkloadModel.parse` makes it a :class:`WorkloadModel`).

    Args:
        text: e.g. ``"hidden_size=8192,num_layers=80"``.

    Returns:
        The keyword arguments, checked (the coefficients can be computed from them).

    Raises:
        ValueError: a malformed pair, an unknown key, a value that is not an integer, or a
            shape :func:`transformer_workload_coefficients` refuses.

    Example:
        >>> parse_workload_model("hidden_size=4096, gated_mlp=true")
        {'hidden_size': 4096, 'gated_mlp': True}
    """
    model: dict[str, Any] = {}
    for pair in text.split(","):
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or key not in _MODEL_KEYS:
            raise ValueError(f"{pair.strip()!r} is not key=value with a key among {', '.join(_MODEL_KEYS)}")
        if key in ("gated_mlp", "causal"):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{key} must be true or false, got {value!r}")
            model[key] = value.lower() in ("true", "1")
        else:
            try:
                model[key] = int(value)
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
    if "hidden_size" not in model:
        raise ValueError("hidden_size is required (e.g. hidden_size=8192)")
    try:
        transformer_workload_coefficients(**model)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from exc
    return model


@dataclass(frozen=True)
class WorkloadModel:
    """A model shape whose forward FLOPs are the balance objective (the ``workload_model``
    option): the keyword arguments of :func:`transformer_workload_coefficients`, checked
    on construction, as one frozen (hashable, picklable) value.

    Raises:
        TypeError, ValueError: a field :func:`transformer_workload_coefficients` refuses.

    Example:
        >>> model = WorkloadModel.parse("hidden_size=8192,num_layers=80")
        >>> model.coefficients(), str(model), model.workloads([10])
        ((49152, 1), 'hidden_size=8192,num_layers=80', [491620])
    """

    hidden_size: int
    num_layers: int = 1
    num_attention_heads: int = 1
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    gated_mlp: bool = False
    experts_per_token: int = 1
    vocab_size: int = 0
    causal: bool = False

    def __post_init__(self) -> None:
        self.coefficients()

    def shape(self) -> dict[str, Any]:
        """The fields that differ from their defaults (``hidden_size`` always), as
        :func:`parse_workload_model` gives them."""
        return {
            f.name: getattr(self, f.name) for f in fields(self)
            if f.name == "hidden_size" or getattr(self, f.name) != f.default
        }

    def coefficients(self) -> tuple[int, int]:
        """``(a, b)`` of :func:`transformer_workload_coefficients` for this shape."""
        return transformer_workload_coefficients(**asdict(self))

    def workloads(self, seq_lens: Sequence[int] | Any) -> list[int]:
        """Each sample's workload ``a*s + b*s**2`` (:func:`transformer_workloads`).

        Complexity: O(n).
        """
        return transformer_workloads(seq_lens, **self.shape())

    def __str__(self) -> str:
        """The shape as ``key=value`` pairs, the text :meth:`parse` reads back."""
        return ",".join(
            f"{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in self.shape().items()
        )

    @classmethod
    def parse(cls, text: str) -> WorkloadModel:
        """The model written as ``key=value`` pairs (:func:`parse_workload_model`).

        Raises:
            ValueError: as :func:`parse_workload_model`.
        """
        return cls(**parse_workload_model(text))
