"""Command-line planner: ``seqlen-balancing plan``, ``sweep`` and ``epoch``.

Both commands simulate one training step of a data-parallel (DP) group as verl 0.9.1's
trainer runs it and plan every rank's micro-batches with this library's planner and DP
agreement. ``plan`` shows one cap in detail; ``sweep`` repeats the step for several caps
(comma-separated ``--max-token-len``, sorted ascending, duplicates dropped) so you can see
where a larger token budget stops saving micro-batches. Nothing here imports torch.

The package, one job per module:

* :mod:`~seqlen_balancing.cli.arguments`: the parser and option checks;
* :mod:`~seqlen_balancing.cli.inputs`: lengths files, JSON (Lines), Parquet;
  :mod:`~seqlen_balancing.cli.tokens`: counting tokens with a local tokenizer;
* :mod:`~seqlen_balancing.cli.step`: the step's rows, verl's balancing and dispatch, planning;
* :mod:`~seqlen_balancing.cli.trainers`: how each verl trainer (``--trainer``: ``main_ppo``,
  ``sft_trainer``, ``sft_trainer_ray``) deals rows to DP ranks and orders an epoch;
* :mod:`~seqlen_balancing.cli.epoch`: ``epoch``, a whole SFT run replayed step by step per cap;
* :mod:`~seqlen_balancing.cli.report`: tables and JSON; :mod:`~seqlen_balancing.cli.plot`: charts;
* :mod:`~seqlen_balancing.cli.entry`: :func:`main`, the console script.

The step: the bundled CHAMP lengths (19,440 conversations, Qwen3 tokenizer) give
``dp_size * batch_size`` rows drawn with ``random.Random(seed).sample`` (with ``.choices``
when the data is too short; ``--in-order``: the first ones). ``--lengths FILE`` without
``--batch-size`` uses every row once, in file order (``--dp-size`` must divide the row
count); with ``--batch-size`` it is drawn like the bundled data (too short is an error).
``--scale X`` multiplies every length by ``X`` and rounds (halves up); ``--truncate`` clips
each length to the cap instead of failing. Then the rows are dealt as ``--trainer`` deals
them (:mod:`~seqlen_balancing.cli.trainers`): for ``main_ppo`` (the default) and
``sft_trainer_ray``, unless ``--no-balance-batch``, reordered as verl's
``trainer.balance_batch`` does, and rank ``r`` gets the ``r``-th of ``dp_size`` equal
contiguous chunks (verl's dispatch); for ``sft_trainer``, never balanced, rank ``r`` gets
rows ``r, r + dp_size, ...`` (``DistributedSampler``). The cap is ``max_token_len * sp_size``.
``--lengths`` is read once, whole, up to ``--max-input-mb`` (default 1,024 MiB).

The cap on what the GPU holds (:mod:`seqlen_balancing.cost`): ``--pad-to-multiple-of N``
makes each sample cost its length rounded up to a multiple of ``N``; ``--tp N``, ``--cp N``
and ``--fp8`` derive verl's Megatron THD alignment instead (``tp*cp*2`` with ``cp > 1``,
else ``tp``; FP8: ``lcm(16, align)`` per sequence and ``align*128`` for the micro-batch's
total); ``--micro-batch-multiple-of N`` rounds each micro-batch's total up to a multiple of
``N`` (verl's ``pad_to_length_bucket``; combined with FP8's by least common multiple), so a
cap is usable as ``cap // N * N``. The plan, the bounds and the messages are then in aligned
tokens; the tables add ``aligned`` and ``aligned mb`` columns. ``sweep`` prints the smallest
``max_token_len`` that fits every sample and group (the costliest, aligned, rounded up to the
bucket, divided by ``--sp-size``; with ``--prefix-lengths``, the longest row). ``--padded`` plans for
models that run padded tensors: a micro-batch costs its rows x its widest row (each rounded
up to ``--pad-to-multiple-of``); the tables show ``footprint`` and ``footprint mb`` (and,
in ``sweep``, the ``padding`` share of the footprint) instead of the aligned columns, and a
micro-batch's JSON ``cost`` is its footprint. ``--max-samples-per-micro-batch N`` keeps
every micro-batch at ``N`` samples or fewer. ``--plot`` checks its
path before anything is read or planned. ``--tokenizer DIR/tokenizer.json`` takes the chat
template and special tokens from the ``tokenizer_config.json`` (or ``chat_template.jinja``)
beside it; without one, ``--messages-field`` says to pass the directory.

Exit codes: 0 success; 1 the step cannot be planned (a sample longer than the cap, or a
planning error from the library, e.g. too few samples for the agreed count; ``sweep``: only
when no cap can be planned, after printing its table); 2 bad usage or
bad input (unreadable or malformed file, naming the row and field; a missing optional
dependency, naming the extra to install). Errors are one line on stderr.

JSON output (``--json``, one object on stdout; keys are stable). Fills are fractions in
[0, 1]; the tables print them as percentages.

``plan --json``:

* ``source``: ``"champ"``, the ``--lengths`` path or ``"-"``; ``n_lengths``: rows in the
  input; ``sampling``: ``"without_replacement"``, ``"with_replacement"``, ``"in_order"`` or
  ``"whole_file"``; ``seed``, ``scale``; ``counted``: how ``--tokenizer`` counted (or null).
* ``max_token_len`` (per GPU), ``cap`` (``max_token_len * sp_size``), ``dp_size``,
  ``batch_size`` (per rank), ``sp_size``, ``trainer``, ``balance_batch``, ``same_micro_num_in_dp``,
  ``force_group_size``, ``num_batches_divided_by`` and ``min_num_micro_batch`` (null when
  not given), ``dynamic_bsz_balance``, ``pad_to_multiple_of`` and
  ``micro_batch_multiple_of`` (as planned; 1: none), ``tp``, ``cp`` (null when not given),
  ``fp8``, ``padded``, ``max_samples_per_micro_batch`` (null when not given); ``over_cap``
  (``"raise"`` or ``"alone"``), ``workload_model`` (the ``--workload-model`` shape as a dict,
  or null); ``truncated``: rows ``--truncate`` clipped.
* ``ranks``: per DP rank: ``rank``, ``samples``, ``tokens``, ``aligned_tokens`` (the
  samples' costs summed), ``count`` (micro-batches),
  ``verl_count`` (with ``--compare-verl``), ``l2_lower_bound``, ``lower_bound`` (the
  strongest bound the rank needed, see :func:`~seqlen_balancing.planning.bounds.lower_bound`),
  ``bound_name`` (which one), ``proven_optimal`` (the rank's own smallest count meets
  ``lower_bound``; bounds in aligned tokens), ``largest_micro_batch``,
  ``largest_micro_batch_cost``, ``fill``, ``workload_spread`` (on the
  ``--workload-model``'s FLOPs when given), ``over_cap_alone`` (with ``--over-cap alone``:
  ``{"index", "cost"}`` of each sample or group over the cap, run alone), ``micro_batches`` in run
  order, each ``{"indices", "tokens", "cost"}`` with positions in the input list (0-based;
  repeats possible with replacement); ``cost``: aligned tokens rounded up to the bucket, at
  most ``cap`` (but an over-cap sample's alone).
* ``agreed_count`` (null when ranks differ), ``total_micro_batches``, ``mean_fill``,
  ``largest_micro_batch``, ``largest_micro_batch_cost``, ``l2_lower_bound_total``,
  ``lower_bound_total`` (no plan of
  the step under the same rules has fewer micro-batches in all: each rank's
  ``lower_bound`` rounded up to ``num_batches_divided_by``, the largest on every rank under
  agreement), ``proven_optimal`` (``total_micro_batches == lower_bound_total``); with
  ``--compare-verl``, ``verl``:
  ``counts``, ``total_micro_batches``, ``saved_micro_batches``, ``saved_percent``,
  ``count_above`` (the search stopped: verl's count is above this) and ``error``.
* ``step_time``: the lock-step model of the step (:mod:`seqlen_balancing.cli.modeled`):
  ``micro_batch_fixed_tokens``, ``unit`` (``24576 x cap``), and for ``verl`` (its dealing and
  plans; nulls without ``--compare-verl``), ``library`` and ``global``
  (:func:`~seqlen_balancing.plan_global_batch`): ``count``, ``step_time``, ``floor`` (in
  workload units) and ``error``.

``sweep --json``: the same settings, plus ``smallest_max_token_len`` (below it the step
cannot be planned) and ``rows``, one per cap: ``max_token_len``, ``cap``,
``agreed_count``, ``micro_batches_per_rank``, ``total_micro_batches``,
``l2_lower_bound_total``, ``lower_bound_total``, ``proven_optimal``, ``mean_fill``,
``largest_micro_batch``, ``largest_micro_batch_cost``, ``truncated``, ``over_cap_alone``
(samples or groups run alone over the cap, all ranks), ``seconds``
and ``verl`` (with ``--compare-verl``); an infeasible cap is ``{max_token_len, cap, error}``.
``plan --json`` holds no timing, so its output is reproducible byte for byte.
"""

from seqlen_balancing.cli.entry import main

__all__ = ["main"]
