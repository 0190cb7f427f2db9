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

verl users (the library switched on inside verl) set the alignment once for every process
with environment variables, read by :func:`alignment_from_env` and
:func:`max_samples_from_env`: :data:`ENV_PAD_TO_MULTIPLE_OF`,
:data:`ENV_MICRO_BATCH_MULTIPLE_OF` and :data:`ENV_MAX_SAMPLES_PER_MICRO_BATCH`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from seqlen_balancing._checks import as_list, describe, non_negative_ints, positive_int

__all__ = [
    "ENV_MAX_SAMPLES_PER_MICRO_BATCH",
    "ENV_MICRO_BATCH_MULTIPLE_OF",
    "ENV_PAD_TO_MULTIPLE_OF",
    "aligned_length",
    "alignment_from_env",
    "max_samples_from_env",
    "megatron_alignment",
    "micro_batch_capacity",
    "micro_batch_cost",
    "padded_micro_batch_cost",
    "sample_costs",
]

#: Environment variable holding ``pad_to_multiple_of`` for every process of a verl job.
ENV_PAD_TO_MULTIPLE_OF = "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF"

#: Environment variable holding ``micro_batch_multiple_of`` for every process of a verl job.
ENV_MICRO_BATCH_MULTIPLE_OF = "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF"

#: Environment variable holding ``max_samples_per_micro_batch`` for every process of a verl job.
ENV_MAX_SAMPLES_PER_MICRO_BATCH = "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH"


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
    if costs is None:
        return [aligned_length(n, pad) for n in values] if pad > 1 else values
    given = non_negative_ints(as_list(costs, "costs"), "costs", "costs")
    if len(given) != len(values):
        raise ValueError(
            f"costs has {len(given)} entries but there are {len(values)} samples; give one "
            "cost per sample"
        )
    return [aligned_length(c, pad) for c in given] if pad > 1 else given


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
    if fp8:
        return math.lcm(16, align), align * 128
    return align, 1


def _env_int(
    environ: Mapping[str, str], name: str, unit: str = "tokens", unset: str = "1: no alignment"
) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"environment variable {name}={text!r} must be a positive integer ({unit}); "
            f"set it to e.g. 16 or unset it ({unset})"
        )
    return value


def alignment_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(pad_to_multiple_of, micro_batch_multiple_of)`` from the environment.

    How a verl job sets the alignment once for every process: export
    ``SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF`` (per-sequence alignment, e.g. 16 for Megatron
    ``tp=4, cp=2``; see :func:`megatron_alignment`) and
    ``SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF`` (per-micro-batch rounding, e.g. verl's
    ``pad_to_length_bucket``) in the driver's environment and in Ray's
    ``runtime_env.env_vars``, so that every worker plans with the same costs (ranks with
    different costs would plan under different caps). The verl switch reads them with this
    function for calls that do not pass the parameters. Unset or empty: 1 (verl's rule).

    Args:
        environ: the mapping to read (default ``os.environ``).

    Returns:
        Two positive ints, in tokens.

    Raises:
        ValueError: a variable is set to something other than a positive integer (the
            message names it).

    Complexity: O(1).

    Example:
        >>> alignment_from_env({"SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "16"})
        (16, 1)
        >>> alignment_from_env({})
        (1, 1)
    """
    env = os.environ if environ is None else environ
    return _env_int(env, ENV_PAD_TO_MULTIPLE_OF), _env_int(env, ENV_MICRO_BATCH_MULTIPLE_OF)


def max_samples_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``max_samples_per_micro_batch`` from :data:`ENV_MAX_SAMPLES_PER_MICRO_BATCH`.

    How a verl job limits the samples per micro-batch (e.g. to what a CUDA graph was
    captured for, or Megatron's ``max_sequences_per_bin``) once for every process: export
    ``SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH`` in the driver's environment and in Ray's
    ``runtime_env.env_vars``. The verl switch reads it for calls that do not pass the
    parameter. Unset or empty: ``None`` (no limit, verl's rule).

    Args:
        environ: the mapping to read (default ``os.environ``).

    Returns:
        A positive int (samples), or ``None``.

    Raises:
        ValueError: the variable is set to something other than a positive integer.

    Complexity: O(1).

    Example:
        >>> max_samples_from_env({"SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH": "16"})
        16
        >>> max_samples_from_env({}) is None
        True
    """
    env = os.environ if environ is None else environ
    if not env.get(ENV_MAX_SAMPLES_PER_MICRO_BATCH, "").strip():
        return None
    return _env_int(env, ENV_MAX_SAMPLES_PER_MICRO_BATCH, "samples", "no limit")
