"""The loss normaliser of a whole step: one token-mean over every micro-batch of every DP rank.

A token-mean loss over a step cut into micro-batches of different sizes must divide every
token's loss by one number, the loss tokens of the whole step (every micro-batch of every
DP rank): a mean per micro-batch or per rank weighs each token by the size of the
micro-batch it landed in, so the gradient would change with the plan (verl #5625, NeMo-RL
#4242, AReaL #1730). :func:`~seqlen_balancing.step_loss_scales` counts them with one ``all_reduce`` over the
DP group and returns the scale of each micro-batch's summed loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch
import torch.distributed as dist

from seqlen_balancing.agreement.collective import collective_device
from seqlen_balancing.batch.micro_batches import _begin

__all__ = ["StepLossScales", "step_loss_scales"]


@dataclass(frozen=True)
class StepLossScales:
    """What :func:`~seqlen_balancing.step_loss_scales` returns.

    Attributes:
        total_tokens: the step's loss normaliser: the loss tokens (the sum of the loss
            weights) of every micro-batch of every DP rank; an ``int`` when that sum is
            whole, the same on every rank.
        scales: for each of this rank's micro-batches, the factor of its summed loss
            (``(token_loss * loss_mask).sum()``): ``dp_size / total_tokens`` when the
            gradients are averaged over the ranks (DDP, FSDP), ``1 / total_tokens`` when
            they are summed; 0.0 for every one when the step has no loss token.
        tokens: this rank's loss tokens in each micro-batch.
        dp_size: the ranks the tokens were summed over (1 without a DP group).
    """

    total_tokens: float
    scales: list[float]
    tokens: list[float]
    dp_size: int


def step_loss_scales(
    micro_batches_or_token_counts: Sequence[Any],
    dp_group: Any = None,
    loss_key: str = "loss_mask",
    *,
    average_gradients: bool = True,
) -> StepLossScales:
    """The loss normaliser of a whole step and the scale of each micro-batch's summed loss.

    Each rank sums its micro-batches' loss weights (``micro_batch[loss_key].sum()``; a
    dummy micro-batch or a filler row, whose weights are zero, adds nothing) and one
    ``all_reduce`` (SUM, float64, exact for whole counts below 2**53) over ``dp_group`` gives
    the step's total ``T``. Accumulating ``scales[i] * (token_loss_i * loss_mask_i).sum()``
    over the micro-batches then gives every rank the gradient of the full step's token-mean
    loss, whatever the split: with ``average_gradients`` (DDP and FSDP, which average
    gradients over the ``dp_size`` ranks; verl's engines) the scale is ``dp_size / T``; without
    it (the caller sums gradients with ``all_reduce``) it is ``1 / T``.

    Args:
        micro_batches_or_token_counts: this rank's micro-batches, each a TensorDict (or a
            mapping) holding ``loss_key``, or an object with a ``.batch`` holding it (verl's
            ``DataProto``); or each micro-batch's loss-token count (a number >= 0 or a 0-d
            tensor). An empty sequence is a rank with no micro-batch.
        dp_group: the DP process group; ``None`` (or ``torch.distributed`` not
            initialised): this rank's micro-batches alone (``dp_size`` 1), no collective.
        loss_key: the entry of loss weights (verl: ``loss_mask`` in SFT, ``response_mask``
            in PPO); dense or jagged nested.
        average_gradients: the gradients are averaged over the ranks (DDP, FSDP).

    Returns:
        A :class:`~seqlen_balancing.batch.loss.StepLossScales`.

    Raises:
        TypeError: a micro-batch that is neither a batch nor a number, or a loss entry that
            is not a tensor; a ``dp_group`` that is not a process group.
        ValueError: a micro-batch without ``loss_key`` (naming the keys it holds), a
            negative or non-finite count or weight sum; this process not in ``dp_group``.
            With a DP group every rank raises the same error, naming the lowest rank at
            fault (a second collective, made only then).

    Complexity: one sum per micro-batch on its device, one host copy for them all, one
    ``all_reduce`` of two values.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> mbs = [TensorDict({"loss_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}, [2]),
        ...        TensorDict({"loss_mask": torch.tensor([[1, 1, 1]])}, [1])]
        >>> step = step_loss_scales(mbs)
        >>> step.total_tokens, step.tokens, step.scales
        (6, [3, 3], [0.16666666666666666, 0.16666666666666666])
    """
    local = _local_tokens(micro_batches_or_token_counts, loss_key)
    if not _begin(dp_group, True):  # verl's rule; a process outside the group raises here
        if isinstance(local, Exception):
            raise local
        return _scales(_number(math.fsum(local)), local, 1, average_gradients)
    failed, counts = (local, []) if isinstance(local, Exception) else (None, local)
    vector = torch.tensor([math.fsum(counts), float(failed is not None)], dtype=torch.float64,
                          device=collective_device(dp_group))
    dist.all_reduce(vector, group=dp_group)  # the one collective: tokens, ranks that failed
    if vector[1].item() > 0:  # every rank raises the lowest faulty rank's error (a second collective)
        said: list[Any] = [None] * dist.get_world_size(dp_group)
        dist.all_gather_object(said, None if failed is None else (type(failed).__name__, str(failed)),
                               group=dp_group)
        rank, (kind, message) = next((r, s) for r, s in enumerate(said) if s is not None)
        where = f"rank {rank} of the DP group (global rank {dist.get_global_rank(dp_group, rank)})"
        raise (TypeError if kind == "TypeError" else ValueError)(f"{where}: step_loss_scales: {message}")
    return _scales(_number(vector[0].item()), counts, dist.get_world_size(dp_group), average_gradients)


def _scales(total: float, local: list[Any], dp_size: int, average: bool) -> StepLossScales:
    scale = (dp_size if average else 1) / total if total else 0.0
    return StepLossScales(total, [scale] * len(local), local, dp_size)


def _local_tokens(items: Any, loss_key: str) -> list[Any] | Exception:
    """Each micro-batch's loss tokens, or the error that stops counting them (returned, not
    raised, so that it can travel through the DP group's collective)."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        return TypeError(f"micro_batches_or_token_counts must be a sequence of micro-batches or of "
                         f"token counts, got {type(items).__name__}")
    counts: list[Any] = []
    for index, item in enumerate(items):
        try:
            counts.append(_tokens(item, loss_key))
        except (TypeError, ValueError) as error:
            return type(error)(f"micro-batch {index}: {error}")
    on_device = [count for count in counts if isinstance(count, torch.Tensor)]
    if on_device:  # one host copy for every micro-batch, not a device sync each
        try:  # a device that cannot give its sums back (a meta tensor) is this rank's error
            host = iter(torch.stack([t.to(on_device[0].device) for t in on_device]).tolist())
        except (NotImplementedError, RuntimeError) as error:
            return ValueError(f"the loss weights cannot be copied to the host: {error}")
        counts = [_number(next(host)) if isinstance(c, torch.Tensor) else c for c in counts]
    for index, count in enumerate(counts):
        if not math.isfinite(count) or count < 0:
            return ValueError(f"micro-batch {index}: its loss tokens must be a finite number >= 0, "
                              f"got {count}; loss weights are 0 (masked) or positive")
    return counts


def _tokens(item: Any, loss_key: str) -> Any:
    """One micro-batch's loss tokens: a number, or a float64 0-d tensor on its device."""
    if isinstance(item, torch.Tensor) and item.dim() == 0 and not item.dtype.is_complex:
        return item.detach().double()
    if isinstance(item, Real) and not isinstance(item, bool):
        return _number(item)
    batch = getattr(item, "batch", item)  # verl's DataProto holds its tensors in .batch
    if not hasattr(batch, "keys") or not hasattr(batch, "__getitem__"):
        raise TypeError(f"expected a TensorDict (or a DataProto) holding {loss_key!r}, or a count of "
                        f"loss tokens, got {type(item).__name__}")
    if loss_key not in batch.keys():
        keys = sorted(str(key) for key in batch.keys())
        raise ValueError(f"it has no {loss_key!r} entry (it holds {keys}); pass loss_key= the entry "
                         "of loss weights (verl: loss_mask in SFT, response_mask in PPO)")
    weights = batch[loss_key]
    if not isinstance(weights, torch.Tensor) or weights.dtype.is_complex:
        raise TypeError(f"its {loss_key!r} entry must be a real tensor, got {type(weights).__name__}")
    if weights.is_nested:  # jagged rows: their values; a strided nested tensor row by row
        parts = [weights.values()] if weights.layout == torch.jagged else list(weights.unbind())
        return torch.stack([part.detach().double().sum() for part in parts]).sum()
    return weights.detach().double().sum()


def _number(value: Any) -> Any:
    value = float(value)
    return int(value) if value.is_integer() else value
