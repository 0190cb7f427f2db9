"""How each verl 0.9.1 trainer feeds its DP ranks: which rows a step holds, and which rank gets which.

Four trainers are modelled (``--trainer``), each by the rule its own code follows in verl
0.9.1 (read from ``verl/trainer/main_ppo.py`` with ``ppo/v1/trainer_base.py``,
``ppo/ray_trainer.py``, ``sft_trainer.py`` and ``sft_trainer_ray.py``; checked against verl
itself in ``tests/compat/test_trainers.py``):

* ``main_ppo`` (PPO/GRPO with ``trainer.use_v1``, verl 0.9.1's default: the V1
  ``PPOTrainer``): every step is balanced, whatever ``trainer.balance_batch`` says: the
  batch is first padded with synthetic rows of :data:`SYNTHETIC_ROW_TOKENS` tokens to a
  multiple of ``lcm(dp, mini-batch sizes)`` (verl's ``_get_required_batch_multiple`` and
  ``upsample_batch_to_divisible_size``: the DP size, the critic's
  ``ppo_mini_batch_size x rollout.n`` where a critic trains, and the actor's once
  ``trainer.critic_warmup`` steps are past; ``--mini-batch-size`` gives those sizes, else
  the DP size alone is modelled), then split
  into ``dp`` parts of equal sample counts by Karmarkar-Karp on the workloads
  (``24576*s + s**2``), the parts concatenated as they come (each in row order); the
  dispatch gives rank ``r`` the ``r``-th of ``dp`` equal contiguous chunks.
* ``main_ppo_v0`` (``trainer.use_v1=False``: the legacy ``RayPPOTrainer``): with
  ``trainer.balance_batch`` (default on) the same split, each part sorted by workload and
  laid out lightest at both ends; then the same dispatch.
* ``sft_trainer`` (``torchrun``, one process per GPU): no balancing at all. Every rank
  builds ``DistributedSampler(shuffle=True, drop_last=True)`` with the default seed 0 and
  calls ``set_epoch(epoch)``: the epoch's order is ``torch.randperm(n)`` seeded with
  ``seed + epoch``, cut to a multiple of ``dp``, and rank ``r`` takes every ``dp``-th row
  from position ``r``; its data loader takes ``global_batch_size // dp`` of them per step
  (``drop_last``: a short last step is dropped). Within one step, rank ``r`` thus holds the
  step's rows ``r, r + dp, r + 2 dp, ...``.
* ``sft_trainer_ray`` (the driver loads the data): one ``DistributedSampler`` with one
  replica (same shuffle, seed 0, ``set_epoch``, ``drop_last``) and ``global_batch_size``
  rows per step; with ``trainer.balance_batch`` (default on) the rows are balanced as
  ``main_ppo`` does (equal-size Karmarkar-Karp on workloads, each part lightest at both
  ends) before the dispatch's equal contiguous chunks. verl computes these workloads in
  float32 (``torch.Tensor`` of lengths); this model uses exact integers, which can only
  differ where float32 rounding ties two workloads.

Planning a rank's rows is the same for all three: the engine's ``prepare_micro_batches``
with the DP group (``same_micro_num_in_dp`` on). Only the shuffle needs torch
(``torch.randperm``, as ``DistributedSampler`` calls it); it is imported when used.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from seqlen_balancing.cli._text import CliError, refuse
from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.planning.partition import get_seqlen_balanced_partitions, workload

__all__ = [
    "DEFAULT_GLOBAL_BATCH_SIZE",
    "DEFAULT_SAMPLER_SEED",
    "DEFAULT_TRAINER",
    "EPOCH_TRAINERS",
    "RULES",
    "SYNTHETIC_ROW_TOKENS",
    "TRAINERS",
    "EpochStep",
    "always_balances",
    "balance_order",
    "balances_by_default",
    "batch_multiple",
    "deal",
    "epoch_steps",
    "sampler_indices",
    "synthetic_rows",
]

#: The trainers ``--trainer`` models.
TRAINERS = ("main_ppo", "main_ppo_v0", "sft_trainer", "sft_trainer_ray")

#: Tokens of each synthetic row verl 0.9.1's V1 trainer pads a batch with
#: (``verl.trainer.ppo.padding_utils.SYNTHETIC_PADDING_SEQ_LEN``).
SYNTHETIC_ROW_TOKENS = 128

#: ``plan`` and ``sweep`` model this one unless told (the RL trainer the planner began with).
DEFAULT_TRAINER = "main_ppo"

#: The trainers ``epoch`` replays (an SFT dataset, epoch by epoch).
EPOCH_TRAINERS = ("sft_trainer", "sft_trainer_ray")

#: ``DistributedSampler``'s seed: verl's SFT trainers pass none, so torch's default, 0.
DEFAULT_SAMPLER_SEED = 0

#: ``data.train_batch_size`` in verl 0.9.1's ``sft_trainer_engine.yaml``.
DEFAULT_GLOBAL_BATCH_SIZE = 256

#: Each trainer's rule in one line, for ``--help``, the report's header and the docs.
RULES = {
    "main_ppo": (
        "verl 0.9.1 main_ppo (its default V1 trainer): every step, whatever "
        "trainer.balance_batch says, padded with synthetic rows of 128 tokens to a multiple "
        "of lcm(DP size, --mini-batch-size), split into equal sample counts by Karmarkar-Karp "
        "on workload; rank r gets the r-th equal contiguous chunk"
    ),
    "main_ppo_v0": (
        "verl 0.9.1 main_ppo with trainer.use_v1=False (RayPPOTrainer): trainer.balance_batch "
        "(default on) splits the step into equal sample counts by Karmarkar-Karp on workload, "
        "then rank r gets the r-th equal contiguous chunk"
    ),
    "sft_trainer": (
        "verl 0.9.1 sft_trainer: no balancing; DistributedSampler(shuffle=True, seed 0, "
        "drop_last=True, set_epoch each epoch), rank r takes every dp-th row of the step from row r"
    ),
    "sft_trainer_ray": (
        "verl 0.9.1 sft_trainer_ray: one shuffled sampler in the driver (seed 0, drop_last); "
        "trainer.balance_batch (default on) balances each step as main_ppo does, then equal "
        "contiguous chunks"
    ),
}


def balances_by_default(trainer: str) -> bool:
    """Whether ``trainer`` balances a step across DP ranks unless told not to."""
    return trainer != "sft_trainer"


def always_balances(trainer: str) -> bool:
    """Whether ``trainer`` balances every step whatever ``trainer.balance_batch`` says
    (verl 0.9.1's V1 trainer, ``main_ppo``'s default)."""
    return trainer == "main_ppo"


def batch_multiple(dp_size: int, mini_batch_sizes: Sequence[int] = ()) -> int:
    """What verl 0.9.1's V1 trainer pads a step to a multiple of: ``lcm(dp_size, *sizes)``
    (``PPOTrainer._get_required_batch_multiple``; ``mini_batch_sizes`` are the actor's and
    the critic's ``ppo_mini_batch_size x rollout.n``, those that train at the step).

    Example:
        >>> batch_multiple(8), batch_multiple(8, (12,)), batch_multiple(4, (6, 10))
        (8, 24, 60)
    """
    return math.lcm(dp_size, *mini_batch_sizes)


def synthetic_rows(n: int, dp_size: int, trainer: str, mini_batch_sizes: Sequence[int] = ()) -> int:
    """The synthetic rows ``trainer`` adds to a step of ``n`` rows: ``main_ppo`` (V1) pads
    to a multiple of :func:`batch_multiple`; the others add none.

    Example:
        >>> synthetic_rows(9, 4, "main_ppo"), synthetic_rows(9, 4, "main_ppo_v0")
        (3, 0)
        >>> synthetic_rows(9, 4, "main_ppo", (6,))  # to 12, lcm(4, 6)
        3
        >>> synthetic_rows(13, 4, "main_ppo", (6,))  # to 24
        11
    """
    return -n % batch_multiple(dp_size, mini_batch_sizes) if always_balances(trainer) else 0


def balance_order(
    lengths: Sequence[int], dp_size: int, group: int = 1, model: WorkloadModel | None = None,
    ends: bool = True,
) -> list[int]:
    """verl 0.9.1's ``_balance_batch`` order of the step's rows (indices into ``lengths``).

    Args:
        lengths: tokens of each row of the step, in dispatch order.
        dp_size: DP ranks; ``len(lengths) / dp_size`` rows go to each, in contiguous chunks.
        group: rows per forced group (kept whole, in order, on one rank).
        model: a ``--workload-model`` shape: balance on its FLOPs (what the switch's
            ``calculate_workload`` gives verl's trainer), else verl's workload.
        ends: each part sorted by workload, lightest at both ends (the legacy
            ``RayPPOTrainer`` and ``sft_trainer_ray``); False: each part in row order, as
            Karmarkar-Karp returns it (the V1 trainer).

    Returns:
        A permutation of ``range(len(lengths))``: rank ``r`` gets its ``r``-th equal chunk.

    Raises:
        CliError: (exit 2) the groups cannot be shared equally by the ranks.

    Complexity: Karmarkar-Karp's O(n log n + n dp).
    """
    n = len(lengths)
    per_row = model.workloads(list(lengths)) if model is not None else [workload(s) for s in lengths]
    groups = n // group
    if n % group or groups % dp_size:
        raise CliError(
            f"balancing keeps groups of --force-group-size {group} rows whole: the step's "
            f"{n} rows make {groups} groups, which {dp_size} DP ranks cannot share equally; "
            "pass a --batch-size that is a multiple of the group size, or --no-balance-batch"
        )
    loads = [sum(per_row[g * group : (g + 1) * group]) for g in range(groups)]
    order: list[int] = []
    for part in get_seqlen_balanced_partitions(loads, dp_size, equal_size=True):
        if ends and group == 1:  # verl sorts single rows, lightest at both ends; groups stay as dealt
            part = sorted(part, key=lambda i: (loads[i], i))
            part = part[::2] + part[1::2][::-1]
        order += [g * group + j for g in part for j in range(group)]
    return order


def deal(
    lengths: Sequence[int],
    dp_size: int,
    trainer: str,
    balance: bool,
    group: int = 1,
    model: WorkloadModel | None = None,
) -> list[list[int]]:
    """The step's rows each DP rank gets (positions into ``lengths``, in the rank's order).

    Args:
        lengths: tokens of each row of the step, in the sampler's order.
        dp_size: DP ranks; each gets ``len(lengths) / dp_size`` rows.
        trainer: one of :data:`TRAINERS`.
        balance: ``trainer.balance_batch``; ``sft_trainer`` never balances (the command
            line refuses ``--balance-batch`` with it), and for ``main_ppo`` (V1, which always
            balances) the command line always passes True.
        group: rows per forced group, kept whole when balancing (``main_ppo``).
        model: a ``--workload-model`` shape to balance on (:func:`balance_order`), or ``None``.

    Returns:
        ``dp_size`` lists of positions.

    Example:
        >>> deal([5, 6, 7, 8], 2, "sft_trainer", False)
        [[0, 2], [1, 3]]
        >>> deal([5, 6, 7, 8], 2, "main_ppo_v0", False)
        [[0, 1], [2, 3]]
        >>> deal([5, 6, 7, 8], 2, "main_ppo", True)  # V1: each part in row order
        [[0, 3], [1, 2]]
    """
    n = len(lengths)
    if trainer == "sft_trainer":
        return [list(range(rank, n, dp_size)) for rank in range(dp_size)]
    # verl's V1 trainer leaves each part in row order, the others lightest at both ends
    order = (balance_order(lengths, dp_size, group, model, not always_balances(trainer))
             if balance and dp_size > 1 else list(range(n)))
    size = n // dp_size
    return [order[rank * size : (rank + 1) * size] for rank in range(dp_size)]


def sampler_indices(n: int, replicas: int, rank: int, seed: int, epoch: int) -> list[int]:
    """The rows ``DistributedSampler(shuffle=True, drop_last=True)`` gives ``rank`` in ``epoch``.

    The order is ``torch.randperm(n)`` with a generator seeded ``seed + epoch`` (what
    ``set_epoch`` selects), cut to the largest multiple of ``replicas`` not above ``n``;
    ``rank`` takes the positions ``rank, rank + replicas, ...``.

    Raises:
        CliError: (exit 2) torch is not installed (the shuffle is torch's own).
    """
    try:
        import torch
    except ImportError:
        raise CliError(
            "epoch replays torch's DistributedSampler shuffle and needs torch (pip install "
            "torch); plan and sweep do not"
        ) from None
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    return [int(i) for i in order[rank : n // replicas * replicas : replicas]]


@dataclass(frozen=True)
class EpochStep:
    """One training step of a replay: ``ranks[r]`` holds the dataset rows of DP rank ``r``."""

    epoch: int  # 0-based
    step: int  # 1-based over the whole run
    ranks: list[list[int]]
    rows: list[int] = field(default_factory=list)  # the step's rows in the sampler's order


def steps_per_epoch(n: int, dp_size: int, global_batch_size: int, trainer: str) -> int:
    """Steps in one epoch of ``n`` rows (both SFT trainers drop a short last step)."""
    if trainer == "sft_trainer":
        return (n // dp_size) // (global_batch_size // dp_size)
    return n // global_batch_size


def check_epoch(n: int, dp_size: int, global_batch_size: int, trainer: str) -> None:
    """Refuse a replay the trainer could not run (CliError, exit 2, saying why)."""
    refuse([
        (trainer == "sft_trainer_ray" and global_batch_size % dp_size,
         f"--global-batch-size {global_batch_size} is not a multiple of --dp-size {dp_size}: "
         "sft_trainer_ray balances each step into equal parts (verl asserts it); pass a multiple"),
        (global_batch_size < dp_size,
         f"--global-batch-size {global_batch_size} is below --dp-size {dp_size}: every rank "
         "needs at least one row per step"),
        (global_batch_size >= dp_size and steps_per_epoch(n, dp_size, global_batch_size, trainer) == 0,
         f"{n} rows make no full step of --global-batch-size {global_batch_size} on --dp-size "
         f"{dp_size} (the trainer drops a short last step); lower --global-batch-size"),
    ])


def epoch_steps(
    lengths: Sequence[int],
    dp_size: int,
    global_batch_size: int,
    trainer: str,
    seed: int,
    epochs: int,
    balance: bool,
    model: WorkloadModel | None = None,
    group: int = 1,
) -> Iterator[EpochStep]:
    """Every step of ``epochs`` epochs as ``trainer`` feeds them (see the module docstring).

    Args:
        lengths: tokens of every dataset row.
        dp_size: DP ranks.
        global_batch_size: ``data.train_batch_size``: rows per step over all ranks.
        trainer: ``"sft_trainer"`` or ``"sft_trainer_ray"``.
        seed: the sampler's seed (verl's: 0).
        epochs: ``trainer.total_epochs``.
        balance: ``trainer.balance_batch`` (``sft_trainer_ray`` only).
        model: a ``--workload-model`` shape the balance weighs (the switch's
            ``calculate_workload``), or ``None``: verl's workload.
        group: ``--force-group-size``: the balance keeps groups of this many consecutive rows
            of the step whole, as :func:`deal` does for ``plan`` (where a rank's rows are a
            multiple of it; else the step is not balanced, and the planner refuses it).

    Yields:
        One :class:`EpochStep` per step, in training order.

    Raises:
        CliError: (exit 2) as :func:`check_epoch`, or torch missing.
    """
    n = len(lengths)
    check_epoch(n, dp_size, global_batch_size, trainer)
    per_epoch = steps_per_epoch(n, dp_size, global_batch_size, trainer)
    # sft_trainer's ranks take global_batch_size // dp rows each (sft_trainer_ray's dp divides it)
    size = global_batch_size // dp_size * dp_size
    for epoch in range(epochs):
        # one shuffle per epoch: sft_trainer's per-rank samplers draw the same permutation, and
        # rank r's rows of a step are the step's rows r, r + dp, ... of it (deal's sft_trainer rule)
        order = sampler_indices(n, 1, 0, seed, epoch)
        for s in range(per_epoch):
            rows = order[s * size : (s + 1) * size]
            whole = size // dp_size % group == 0  # the groups fit each rank's rows
            dealt = deal([lengths[i] for i in rows], dp_size, trainer, balance and whole, group, model)
            yield EpochStep(epoch, epoch * per_epoch + s + 1, [[rows[p] for p in part] for part in dealt],
                            rows)
