"""The whole step balanced across verl's DP ranks: ``SEQLEN_BALANCING_BALANCE_STEP=1``.

With :data:`~seqlen_balancing.options.ENV_BALANCE_STEP` on beside the switch
(``SEQLEN_BALANCING_VERL=1``), :func:`~seqlen_balancing.verl.apply` also hands the choice
of which samples each DP rank gets to :func:`~seqlen_balancing.plan_global_batch`, in the
two places where verl 0.9.1 makes it:

* ``verl.trainer.sft_trainer`` (torchrun): its binding ``DistributedSampler`` becomes
  :func:`sft_sampler`, which for verl's train sampler builds a
  :class:`~seqlen_balancing.BalancedDistributedSampler` with verl's own arguments (DP rank
  and size, ``shuffle``, ``drop_last``, the default seed), each row's length read once from
  the dataset (:func:`row_tokens`), ``batch_size = data.train_batch_size // dp_size`` and
  the cap ``data.max_token_len_per_gpu x engine.ulysses_sequence_parallel_size``
  (:func:`sft_settings`). Each step holds the rows ``DistributedSampler`` gives it; only
  their ranks change. The validation sampler stays torch's. The config comes from the
  trainer itself where the module is imported (``SFTTrainer._build_dataloader`` is wrapped
  to make it known); ``torchrun -m verl.trainer.sft_trainer`` runs the file as
  ``__main__``, which no import hook sees, so there the binding is replaced in ``__main__``
  itself (bound before its first ``import verl``, where the plugin switches) and the config
  is the one verl's ``main`` passes to ``verl.utils.device.auto_set_device`` (wrapped to
  keep it), the train sampler being the shuffled one.
* PPO's balance step: ``RayPPOTrainer._balance_batch`` (``verl.trainer.ppo.ray_trainer``,
  run when ``trainer.balance_batch``) and the V1 trainer's ``PPOTrainer._balance_batch``
  (``verl.trainer.ppo.v1.trainer_base``, run on every step, after padding the batch with
  synthetic rows to a size divisible by the DP size and the mini-batch sizes; that padding
  is kept, done by verl's own ``upsample_batch_to_divisible_size``). The batch is reordered
  by :func:`ppo_order` at the actor's cap ``ppo_max_token_len_per_gpu x
  ulysses_sequence_parallel_size`` (:func:`ppo_settings`): each mini-batch of the actor's
  update (``ppo_mini_batch_size x rollout.n`` samples, consecutive in the batch as it
  arrives) is planned as one step, and rank ``r``'s equal contiguous chunk (verl's dispatch)
  is its part of mini-batch 0, then of mini-batch 1, ...; the worker's mini-batch split
  (equal contiguous chunks of its part) thus gets each mini-batch's planned samples back.
  The metrics verl logs (``global_seqlen/*``) are computed on the new parts.

Both plan with the switch's planning options of the environment (:func:`_rule`:
``pad_to_multiple_of``, ``micro_batch_multiple_of``, ``max_samples_per_micro_batch``,
``over_cap``, ``micro_batch_fixed_tokens``, the workload model); with ``over_cap="alone"`` a
sample over the cap takes a micro-batch of its own on one rank. Where the plan cannot be
made (the actor on the static path, ``use_prefix_grouper``, a sample over the cap without
``over_cap="alone"``, a batch the ranks cannot share equally), verl's own code runs, with
a WARNING naming the reason when the planner refused. ``verl.trainer.sft_trainer_ray``
splits each global batch over the ranks inside ``SFTTrainer.fit``, where nothing can be
replaced: importing it logs why the variable does not act there. Nothing else of verl changes: its
dispatch, mini-batch split and micro-batching (the switched ``prepare_micro_batches``,
which plans each rank's rows and agrees on the count) run as before. Every replacement is
recorded; :func:`disable` (called by :func:`~seqlen_balancing.verl.revert`) restores verl's.

Torch is imported only when a sampler is built or a batch is reordered.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from seqlen_balancing.options import ENV_BALANCE_STEP, PlanOptions, env_switch
from seqlen_balancing.planning.partition import log_seqlen_unbalance
from seqlen_balancing.verl.hook import put_back

__all__ = [
    "disable",
    "enable",
    "is_enabled",
    "on_import",
    "ppo_order",
    "ppo_settings",
    "requested",
    "row_tokens",
    "sft_sampler",
    "sft_settings",
]

logger = logging.getLogger("seqlen_balancing.verl")

#: The verl modules this acts on, and what it replaces in each (holder.attribute).
TARGETS = {
    "verl.utils.device": ("auto_set_device",),
    "verl.trainer.sft_trainer": ("DistributedSampler", "SFTTrainer._build_dataloader"),
    "verl.trainer.ppo.ray_trainer": ("RayPPOTrainer._balance_batch",),
    "verl.trainer.ppo.v1.trainer_base": ("PPOTrainer._balance_batch",),
    # the same file run as ``torchrun -m`` (``__main__``): what it has bound so far
    "__main__ verl.trainer.sft_trainer": ("DistributedSampler", "auto_set_device"),
}

#: verl's Ray SFT trainer, where the variable cannot act (:func:`_say_not_here`).
RAY_SFT = "verl.trainer.sft_trainer_ray"

#: The trainer whose ``_build_dataloader`` is running in this context, if any.
_BUILDING: contextvars.ContextVar[Any] = contextvars.ContextVar("seqlen_balancing_sft_trainer",
                                                                 default=None)


@dataclass
class _State:
    on: bool = False
    options: PlanOptions = field(default_factory=PlanOptions)
    # (holder, name, original, replacement) of each replacement made
    records: list[tuple[Any, str, Any, Any]] = field(default_factory=list)
    announced: set[str] = field(default_factory=set)
    job_config: Any = None  # the config verl's entry point gave auto_set_device


_STATE = _State()


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`~seqlen_balancing.options.ENV_BALANCE_STEP` is on in ``environ``.

    Raises:
        ValueError: a value that is not a switch (the one spelling rule).

    Example:
        >>> requested({"SEQLEN_BALANCING_BALANCE_STEP": "1"}), requested({})
        (True, False)
    """
    env = os.environ if environ is None else environ
    return env_switch(ENV_BALANCE_STEP, env.get(ENV_BALANCE_STEP, ""))


def is_enabled() -> bool:
    """Whether this process balances verl's steps (:func:`enable` ran, :func:`disable` not)."""
    return _STATE.on


# ----------------------------------------------------------------------------- the job's config


def _get(config: Any, path: str, default: Any = None) -> Any:
    """``config.a.b.c`` for a dotted ``path`` (attributes or mapping keys: OmegaConf, dicts,
    dataclasses), ``default`` where a part is missing or ``None``."""
    value = config
    for part in path.split("."):
        try:
            value = value.get(part) if isinstance(value, Mapping) else getattr(value, part)
        except (AttributeError, KeyError):
            return default
        if value is None:
            return default
    return value


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a positive integer to balance the step, got {value!r}")
    return value


def sft_settings(config: Any, num_replicas: int) -> dict[str, int] | None:
    """The balanced sampler's ``batch_size`` and ``max_token_len`` from verl's SFT config.

    ``batch_size = data.train_batch_size // num_replicas`` (verl's data loader's);
    ``max_token_len = data.max_token_len_per_gpu x engine.ulysses_sequence_parallel_size``
    (the budget verl's ``prepare_micro_batches`` cuts each rank's batch under).

    Returns:
        ``{"batch_size", "max_token_len"}``, or ``None`` when ``data.use_dynamic_bsz`` is
        off (micro-batches of a fixed number of rows: no cap to plan under).

    Raises:
        ValueError: a setting that is not a positive integer.

    Example:
        >>> cfg = {"data": {"use_dynamic_bsz": True, "train_batch_size": 16,
        ...                 "max_token_len_per_gpu": 400}, "engine": {"ulysses_sequence_parallel_size": 2}}
        >>> sft_settings(cfg, 2)
        {'batch_size': 8, 'max_token_len': 800}
    """
    if not _get(config, "data.use_dynamic_bsz", False):
        return None
    cap = _positive(_get(config, "data.max_token_len_per_gpu"), "data.max_token_len_per_gpu")
    sp = _positive(_get(config, "engine.ulysses_sequence_parallel_size", 1),
                   "engine.ulysses_sequence_parallel_size")
    batch = _positive(_get(config, "data.train_batch_size"), "data.train_batch_size")
    return {"batch_size": batch // num_replicas, "max_token_len": cap * sp}


def ppo_settings(config: Any) -> tuple[int, int] | None:
    """The actor's cap and global mini-batch size from a PPO config (``ppo_trainer``).

    ``max_token_len = actor.ppo_max_token_len_per_gpu x actor.ulysses_sequence_parallel_size``
    (or the actor's ``fsdp_config``'s, where the actor has none); the mini-batch is
    ``actor.ppo_mini_batch_size x rollout.n`` samples (what verl's workers and the V1
    trainer's padding use), all under ``actor_rollout_ref``.

    Returns:
        ``(max_token_len, mini_batch_size)``, or ``None`` when the actor's
        ``use_dynamic_bsz`` is off.

    Raises:
        ValueError: a setting that is not a positive integer.

    Example:
        >>> actor = {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 4096, "ppo_mini_batch_size": 8}
        >>> ppo_settings({"actor_rollout_ref": {"actor": actor, "rollout": {"n": 4}}})
        (4096, 32)
    """
    actor = _get(config, "actor_rollout_ref.actor")
    if not _get(actor, "use_dynamic_bsz", False):
        return None
    cap = _positive(_get(actor, "ppo_max_token_len_per_gpu"), "actor.ppo_max_token_len_per_gpu")
    sp = _positive(_get(actor, "ulysses_sequence_parallel_size", None)
                   or _get(actor, "fsdp_config.ulysses_sequence_parallel_size", 1),
                   "actor.ulysses_sequence_parallel_size")
    mini = _positive(_get(actor, "ppo_mini_batch_size"), "actor.ppo_mini_batch_size")
    n = _positive(_get(config, "actor_rollout_ref.rollout.n", 1), "rollout.n")
    return cap * sp, mini * n


def _rule(options: PlanOptions) -> dict[str, Any]:
    """The switch's planning options of the environment (those set) as the planner's
    keywords: ``pad_to_multiple_of``, ``micro_batch_multiple_of``,
    ``max_samples_per_micro_batch``, ``over_cap``, ``micro_batch_fixed_tokens`` and the
    workload model (the planner computes its workloads, and prices the fixed cost of a
    micro-batch with its linear coefficient). The others act in each rank's
    ``prepare_micro_batches`` only."""
    return {name: value for name, value in options.changed().items()
            if name in ("pad_to_multiple_of", "micro_batch_multiple_of", "max_samples_per_micro_batch",
                        "over_cap", "micro_batch_fixed_tokens", "workload_model")}


# ----------------------------------------------------------------------------- PPO


def ppo_order(
    seq_lens: Sequence[int],
    dp_size: int,
    max_token_len: int,
    mini_batch_size: int | None = None,
    **rule: Any,
) -> tuple[list[int], list[list[int]]]:
    """The order PPO's balance step gives the batch: rank ``r`` gets the ``r``-th of
    ``dp_size`` equal contiguous chunks, and each mini-batch is planned as one step.

    The batch's ``n`` samples are cut, as they arrived, into mini-batches of
    ``mini_batch_size`` (one, the whole batch, where it is ``None``, does not divide ``n`` or
    is not a multiple of ``dp_size``); each is planned by
    :func:`~seqlen_balancing.plan_global_batch` (``equal_size``); rank ``r``'s chunk is its
    part of mini-batch 0, then of mini-batch 1, ..., each part in the planner's order (its
    micro-batches one after another).

    Args:
        seq_lens: tokens of each of the ``n`` samples (prompt + response).
        dp_size: DP ranks of the actor.
        max_token_len: the actor's cap in tokens (:func:`ppo_settings`).
        mini_batch_size: samples per mini-batch over all ranks, or ``None``.
        rule: passed on to :func:`~seqlen_balancing.plan_global_batch`.

    Returns:
        ``(order, parts)``: ``order`` a permutation of ``range(n)`` for ``batch.reorder``,
        ``parts[r]`` the samples of rank ``r`` (``order``'s ``r``-th chunk).

    Raises:
        ValueError, TypeError: what :func:`~seqlen_balancing.plan_global_batch` refuses (a
            sample over the cap, a mini-batch the ranks cannot share equally, ...).

    Complexity: :func:`~seqlen_balancing.plan_global_batch` once per mini-batch.

    Example:
        >>> ppo_order([600, 500, 400, 300, 200, 100, 50, 50], 2, 1000, mini_batch_size=4)
        ([0, 3, 4, 6, 1, 2, 5, 7], [[0, 3, 4, 6], [1, 2, 5, 7]])
    """
    from seqlen_balancing.global_batch.step import plan_step

    n = len(seq_lens)
    size = mini_batch_size if mini_batch_size and n % mini_batch_size == 0 and \
        mini_batch_size % dp_size == 0 else n
    workloads = rule.pop("workloads", None)
    parts: list[list[int]] = [[] for _ in range(dp_size)]
    for start in range(0, n, size):
        if workloads is not None:  # each mini-batch its own
            rule["workloads"] = list(workloads[start : start + size])
        plan = plan_step(list(seq_lens[start : start + size]), dp_size, max_token_len, **rule)
        for r, samples in enumerate(plan.rank_samples):
            parts[r] += [start + i for i in samples]
    return [i for part in parts for i in part], parts


def _plan_or_none(
    trainer: Any, lengths: list[int], dp_size: int, where: str
) -> tuple[list[int], list[list[int]]] | None:
    """:func:`ppo_order` under the trainer's config, or ``None`` (verl's own code runs)."""
    try:
        settings = ppo_settings(trainer.config)
        if settings is None:
            return None
        planned = ppo_order(lengths, dp_size, *settings, **_rule(_STATE.options))
    except (TypeError, ValueError) as error:
        logger.warning("seqlen-balancing: %s runs verl's own balance this step: %s", where, error)
        return None
    if where not in _STATE.announced:
        _STATE.announced.add(where)
        logger.info("seqlen-balancing: %s plans the whole step across %d DP ranks "
                    "(plan_global_batch, max_token_len=%d, mini-batches of %d samples) in process %d",
                    where, dp_size, *settings, os.getpid())
    return planned


def _ppo_balance_batch(original: Callable[..., Any], v1: bool) -> Callable[..., Any]:
    """PPO's ``_balance_batch`` on the global planner: ``RayPPOTrainer``'s (a DataProto,
    reordered in place) or, with ``v1``, the V1 ``PPOTrainer``'s (a KVBatchMeta: padded to
    a divisible size by verl's own function first, then reordered and returned)."""
    where = "PPOTrainer._balance_batch (V1)" if v1 else "RayPPOTrainer._balance_batch"

    @functools.wraps(original)
    def _balance_batch(self: Any, batch: Any, metrics: Any, logging_prefix: str = "global_seqlen",
                       keep_minibatch: bool = False) -> Any:
        planned = None
        if v1 and ppo_settings(self.config) is not None:
            dp = _dispatch_dp_size(self)
            upsample = vars(sys.modules[original.__module__])["upsample_batch_to_divisible_size"]
            batch = upsample(batch, self._get_required_batch_multiple(dp), self.tokenizer.eos_token_id)
            lengths = [int(tag["seq_len"]) for tag in batch.tags]
            planned = _plan_or_none(self, lengths, dp, where)
        elif not v1 and not (getattr(self, "use_prefix_grouper", False) and "uid" in batch.non_tensor_batch):
            mask = batch.batch["attention_mask"]
            lengths = [int(v) for v in mask.view(mask.shape[0], -1).sum(-1).tolist()]
            planned = _plan_or_none(self, lengths, self._get_dp_size(self.actor_rollout_wg, "actor"), where)
        if planned is None:
            return original(self, batch, metrics, logging_prefix=logging_prefix,
                            keep_minibatch=keep_minibatch)
        import torch

        order, parts = planned
        batch.reorder(order if v1 else torch.tensor(order))
        metrics.update(log_seqlen_unbalance(seqlen_list=lengths, partitions=parts, prefix=logging_prefix))
        return batch if v1 else None

    return _balance_batch


_legacy_balance_batch = functools.partial(_ppo_balance_batch, v1=False)
_v1_balance_batch = functools.partial(_ppo_balance_batch, v1=True)


def _dispatch_dp_size(trainer: Any) -> int:
    """The actor's DP size from the worker group's dispatch info (as verl's V1 trainer asks
    it, cached in ``_dispatch_info``)."""
    group = trainer.actor_rollout_wg
    ranks = group._dispatch_info.get("actor")
    if ranks is None:
        ranks = group._dispatch_info["actor"] = group._query_dispatch_info("actor")
    return int(max(ranks)) + 1


# ----------------------------------------------------------------------------- SFT


def row_tokens(row: Any) -> int:
    """A dataset row's effective tokens, as verl's engines count them: the sum of its
    ``attention_mask`` where it has one (right padding), else the length of its
    ``input_ids`` (verl's ``no_padding`` rows).

    Raises:
        TypeError: a row with neither.

    Example:
        >>> row_tokens({"input_ids": [5, 6, 7]})
        3
    """
    fields = row if isinstance(row, Mapping) else {}
    if fields.get("attention_mask") is not None:
        return int(fields["attention_mask"].sum())
    if fields.get("input_ids") is None:
        raise TypeError(f"an SFT dataset row needs input_ids or attention_mask to be measured, got "
                        f"{type(row).__name__}")
    return len(fields["input_ids"])


def sft_sampler(
    dataset: Any,
    num_replicas: int | None = None,
    rank: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
) -> Any:
    """What ``verl.trainer.sft_trainer.DistributedSampler`` builds while switched (the
    arguments of ``torch.utils.data.DistributedSampler``): for the train dataset of the
    ``SFTTrainer`` whose ``_build_dataloader`` is running (where ``torchrun -m`` runs the
    module as ``__main__``: for the shuffled sampler, verl's train one, under the config
    verl's ``main`` gave ``auto_set_device``), a
    :class:`~seqlen_balancing.BalancedDistributedSampler` with the same arguments and
    :func:`sft_settings`, each row's length read once (:func:`row_tokens` of
    ``dataset[i]``: O(rows) reads, in every rank); for anything else (or with
    ``use_dynamic_bsz`` off, or where the balanced sampler refuses the data, with a WARNING
    naming why), torch's own."""
    from torch.utils.data import DistributedSampler

    plain: dict[str, Any] = {"num_replicas": num_replicas, "rank": rank, "shuffle": shuffle, "seed": seed,
             "drop_last": drop_last}
    trainer = _BUILDING.get()
    if trainer is not None:  # the module imported as such: its trainer is known
        train, config = id(dataset) == id(getattr(trainer, "train_dataset", None)), trainer.config
    else:  # run as ``-m`` (``__main__``): the job's config, and verl's train sampler shuffles
        train, config = bool(shuffle), _STATE.job_config
    if not train or config is None:
        return DistributedSampler(dataset, **plain)
    from seqlen_balancing.global_batch.sampler import BalancedDistributedSampler

    try:
        sampler: Any = DistributedSampler(dataset, **plain)  # torch's checks, and the replicas
        settings = sft_settings(config, sampler.num_replicas)
        if settings is None:
            return sampler
        sampler = BalancedDistributedSampler(
            dataset, **plain, lengths=lambda i: row_tokens(dataset[i]),
            batch_size=settings["batch_size"], max_token_len=settings["max_token_len"],
            **_rule(_STATE.options))
    except (TypeError, ValueError) as error:
        logger.warning("seqlen-balancing: verl.trainer.sft_trainer keeps DistributedSampler: %s%s", error,
                       # what lets a row over the cap be planned (the refusal names the row)
                       "; SEQLEN_BALANCING_OVER_CAP=alone plans such a row in a micro-batch of its own"
                       if "exceeds max_token_len" in str(error) and _STATE.options.over_cap != "alone"
                       else "")
        return DistributedSampler(dataset, **plain)
    logger.info("seqlen-balancing: verl.trainer.sft_trainer's train sampler is BalancedDistributedSampler "
                "in process %d (rank %d of %d, %d rows, batch_size %d per rank, max_token_len %d, "
                "plan options %s)", os.getpid(), sampler.rank, sampler.num_replicas,
                len(sampler.lengths), sampler.batch_size, sampler.max_token_len,
                sampler.options.changed() or "verl's defaults")
    return sampler


def _auto_set_device(original: Callable[..., Any]) -> Callable[..., Any]:
    """``verl.utils.device.auto_set_device``, which every verl entry point's ``main`` calls
    first with the job's whole config, keeping that config for :func:`sft_sampler`."""

    @functools.wraps(original)
    def auto_set_device(config: Any, *args: Any, **kwargs: Any) -> Any:
        _STATE.job_config = config
        if _STATE.on:
            _patch_main()  # the entry point's file has run to its end by now
        return original(config, *args, **kwargs)

    return auto_set_device


def _build_dataloader(original: Callable[..., Any]) -> Callable[..., Any]:
    """``SFTTrainer._build_dataloader`` with the trainer known to :func:`sft_sampler`."""

    @functools.wraps(original)
    def build(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _BUILDING.set(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            _BUILDING.reset(token)

    return build


# ----------------------------------------------------------------------------- patching


_WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "auto_set_device": _auto_set_device,
    "SFTTrainer._build_dataloader": _build_dataloader,
    "RayPPOTrainer._balance_batch": _legacy_balance_batch,
    "PPOTrainer._balance_batch": _v1_balance_batch,
}


def _patch(module: ModuleType, name_as: str | None = None) -> None:
    """Replace the targets of ``module`` (its own name's, or ``name_as``'s: verl's entry
    point run as ``__main__``) that are still verl's."""
    for target in TARGETS.get(name_as or module.__name__, ()):
        *owner, name = target.split(".")  # a module's own name, or its class's
        holder = vars(module).get(owner[0]) if owner else module
        original = None if holder is None else vars(holder).get(name)
        if any((was is holder and named == name) or replaced is original
               for was, named, _, replaced in _STATE.records):
            continue  # already done, or bound from a module already patched
        if original is None:
            if name_as is None:  # another verl release: that place keeps verl's own code
                logger.warning("seqlen-balancing: %s.%s is missing in this verl; %s leaves it as it is",
                               module.__name__, target, ENV_BALANCE_STEP)
            continue
        replacement = sft_sampler if target == "DistributedSampler" else _WRAPPERS[target](original)
        setattr(holder, name, replacement)
        _STATE.records.append((holder, name, original, replacement))


def _patch_main() -> None:
    """``torchrun -m verl.trainer.sft_trainer`` runs that module as ``__main__``, which no
    import hook sees. ``runpy`` imports the package ``verl`` (so the plugin switches) before
    the file runs; the file then binds ``DistributedSampler`` before its first verl import,
    and each verl module it imports brings this back (:func:`on_import`), finding
    ``__main__`` with verl's file's spec: the binding is replaced in ``__main__`` itself.
    ``auto_set_device``, bound after, comes from the patched ``verl.utils.device``."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if main is not None and name == "verl.trainer.sft_trainer":
        _patch(main, name_as="__main__ verl.trainer.sft_trainer")
    elif name == RAY_SFT:
        _say_not_here()


def enable(options: PlanOptions | None = None) -> None:
    """Balance the step in this process: patch the loaded target modules now; those imported
    later are patched by :func:`on_import`. ``options``: the switch's options of the
    environment (their rule options reach the planner). Idempotent; a target this verl
    lacks is left alone, with a WARNING."""
    _STATE.on = True
    _STATE.options = options or PlanOptions()
    for name in [*TARGETS, RAY_SFT]:
        if name in sys.modules:
            on_import(sys.modules[name])
    _patch_main()


def on_import(module: ModuleType) -> None:
    """The switch's post-import hook calls this for every verl module it sees."""
    if _STATE.on:
        if module.__name__ in TARGETS:
            _patch(module)
        elif module.__name__ == RAY_SFT:
            _say_not_here()
        _patch_main()



def _say_not_here() -> None:
    """Once per process: why the variable does not act in ``sft_trainer_ray``."""
    if RAY_SFT in _STATE.announced:
        return
    _STATE.announced.add(RAY_SFT)
    logger.warning(
        "seqlen-balancing: %s does not act in %s (process %d): its driver loads each whole "
        "global batch (DistributedSampler of one replica) and splits it over the DP ranks inside "
        "SFTTrainer.fit (with trainer.balance_batch: the switched calculate_workload and "
        "get_seqlen_balanced_partitions, equal parts of even workload, blind to the cap), where "
        "nothing can be replaced; each rank's micro-batches are still planned by the switched "
        "prepare_micro_batches", ENV_BALANCE_STEP, RAY_SFT, os.getpid())


def disable() -> int:
    """Give verl its own sampler binding and methods back; returns how many were restored."""
    global _STATE
    restored = sum(put_back(*record) for record in reversed(_STATE.records))
    _STATE = _State(options=_STATE.options)  # off: nothing recorded, announced or configured
    return restored
