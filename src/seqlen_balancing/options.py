"""The planning options as one frozen object: one validation, one way in from each source.

:class:`~seqlen_balancing.PlanOptions` holds every option of a plan (all but the cap and the
per-sample data: ``costs``, ``workloads``). Each field is declared once, with its
:class:`~seqlen_balancing.options.Option` metadata: its kind, its one-line doc, the keyword
(the field's name), the command-line flag, the batch setting ``prepare_micro_batches``
reads, the ``SEQLEN_BALANCING_*`` variable of a switched verl job, whether the DP ranks
must agree on it, and where it can act in verl's trainers. Everything else follows from
that declaration:

* **one validation**: :meth:`~seqlen_balancing.PlanOptions.parse` checks and normalises a
  mapping of values (never raising: the error is a record every DP rank can agree on);
  ``PlanOptions(...)`` raises it;
* **keywords** (:meth:`~seqlen_balancing.PlanOptions.from_keywords`): ``options=`` first,
  then each keyword given; the verl-named functions take the library's own options as
  ``**option_keywords`` typed by :class:`~seqlen_balancing.options.OptionKeywords` (their
  verl parameters stay a prefix of the signature);
* **the batch** (:meth:`~seqlen_balancing.PlanOptions.from_batch`): the settings
  ``prepare_micro_batches`` finds in the TensorDict, as verl stores them;
* **the environment** (:meth:`~seqlen_balancing.PlanOptions.from_env`,
  :func:`~seqlen_balancing.options.env_values`): every ``SEQLEN_BALANCING_*`` variable
  checked, unknown names refused, one spelling rule for every switch
  (:func:`~seqlen_balancing.options.env_switch`);
* **the command line** (:func:`~seqlen_balancing.options.add_arguments`,
  :meth:`~seqlen_balancing.PlanOptions.from_args`): one flag per option, generated from the
  metadata.

No torch here: the planner takes a :class:`~seqlen_balancing.PlanOptions` (docs/options.md).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, TypedDict

from seqlen_balancing._checks import (
    SWITCH_OFF,
    SWITCH_ON,
    _integer_or_none,
    as_switch,
    closest_name,
    describe,
)
from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.errors import (
    BelowOne,
    LossWeightKeysNotKeys,
    NotAnInteger,
    NotASwitch,
    NotPlanOptions,
    OverCapNotAString,
    OverheadInvalid,
    OverheadNotANumber,
    PlanError,
    SampleLimitBelowGroup,
    UnknownOption,
    UnknownOverCap,
    WorkloadModelInvalid,
)
from seqlen_balancing.native import ENV_PURE_PYTHON

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

__all__ = [
    "ENV_BALANCE_STEP",
    "ENV_PREFIX",
    "ENV_SWITCH",
    "ENV_SWITCHES",
    "OPTIONS",
    "OPTION_DEFAULTS",
    "OVER_CAP_CHOICES",
    "GroupOptionKeywords",
    "Kind",
    "Option",
    "OptionKeywords",
    "PlanOptionKeywords",
    "PlanOptions",
    "Unpack",
    "add_arguments",
    "env_switch",
    "env_values",
    "step_settings",
]

#: Every environment variable of the library starts with this.
ENV_PREFIX = "SEQLEN_BALANCING_"

#: The main switch, which (on) runs a verl job on the library (:mod:`seqlen_balancing.verl.plugin`).
ENV_SWITCH = "SEQLEN_BALANCING_VERL"

#: Beside :data:`ENV_SWITCH` (and only with it on): the whole step is balanced across the DP
#: ranks by the global planner, in verl's torchrun SFT trainer (its sampler) and in PPO's
#: balance step (``seqlen_balancing.verl.balance_step``). A switch, not an option of a plan.
ENV_BALANCE_STEP = "SEQLEN_BALANCING_BALANCE_STEP"

#: The variables that are switches of the job rather than options of a plan; the third,
#: :data:`~seqlen_balancing.native.ENV_PURE_PYTHON`, keeps the planning loops on their Python
#: code (read at import by :mod:`seqlen_balancing.native`'s callers, under the same rule).
ENV_SWITCHES = (ENV_SWITCH, ENV_BALANCE_STEP, ENV_PURE_PYTHON)

#: The values ``over_cap`` takes: ``"raise"`` (verl's behaviour) or ``"alone"``.
OVER_CAP_CHOICES = ("raise", "alone")


class Kind(Enum):
    """What values an option takes (and how its variable and flag are spelt)."""

    POSITIVE = "a positive integer"
    OPTIONAL = "a positive integer, or none"
    SWITCH = "a switch"
    CHOICE = "one of a few words"
    KEYS = "TensorDict keys"
    MODEL = "a model shape"
    SHARE = "a number >= 0 (tokens of linear work)"


@dataclass(frozen=True)
class Option:
    """An option's declaration (the ``metadata["option"]`` of its
    :class:`~seqlen_balancing.PlanOptions` field).

    Attributes:
        kind: the values it takes.
        doc: one line: what it does.
        flag: the command-line flag of ``plan``, ``sweep`` and ``epoch``.
        env: the ``SEQLEN_BALANCING_*`` variable a switched verl job sets it with, or
            ``None`` (verl passes it, or the switch never sets it).
        batch_key: the setting ``prepare_micro_batches`` reads from the batch, or ``None``.
        agreed: every DP rank must plan with the same value (the agreement checks it);
            false only for ``same_micro_num_in_dp``, which decides whether ranks agree.
        verl_parameter: a parameter of verl 0.9.1's own functions (kept in their order).
        static: it also acts on ``prepare_micro_batches``' static path.
        verl: where it can act in verl 0.9.1's trainers (docs/verl.md's table).
        group: the command line's help group, ``"step"`` or ``"cost"``.
        none_is_default: ``None`` given means the default (1) rather than an error.
    """

    kind: Kind
    doc: str
    flag: str
    env: str | None = None
    batch_key: str | None = None
    agreed: bool = True
    verl_parameter: bool = False
    static: bool = False
    verl: str = ""
    group: str = "step"
    none_is_default: bool = False


def _option(default: Any, **metadata: Any) -> Any:
    return field(default=default, metadata={"option": Option(**metadata)})


_DYNAMIC_PATH = "every dynamic-path call (use_dynamic_bsz): both SFT trainers, every PPO phase"


@dataclass(frozen=True)
class PlanOptions:
    """Every option of a micro-batch plan, checked and normalised (see the module docstring
    and docs/options.md). Frozen and hashable; ``PlanOptions()`` is verl 0.9.1's behaviour.

    Raises:
        TypeError, ValueError: an option of the wrong type or value (the message names it),
            or two that contradict each other (``max_samples_per_micro_batch`` below
            ``force_group_size``).

    Example:
        >>> options = PlanOptions(max_samples_per_micro_batch=8, over_cap="alone")
        >>> options.changed()
        {'max_samples_per_micro_batch': 8, 'over_cap': 'alone'}
        >>> PlanOptions(pad_to_multiple_of=0)
        Traceback (most recent call last):
        ...
        ValueError: pad_to_multiple_of must be a positive integer (>= 1), got 0
    """

    force_group_size: int = _option(
        1, kind=Kind.POSITIVE, flag="--force-group-size",
        batch_key="force_group_size", verl_parameter=True, static=True,
        doc="consecutive samples [g*size, (g+1)*size) that must share a micro-batch",
        verl="read from the batch by prepare_micro_batches; no verl 0.9.1 code sets it",
    )
    num_batches_divided_by: int | None = _option(
        None, kind=Kind.OPTIONAL,
        flag="--num-batches-divided-by", verl_parameter=True,
        doc="round the micro-batch count up to a multiple of this",
        verl="Megatron with virtual pipeline stages passes microbatch_group_size_per_vp_stage",
    )
    min_num_micro_batch: int | None = _option(
        None, kind=Kind.OPTIONAL,
        flag="--min-num-micro-batch", verl_parameter=True,
        doc="at least this many micro-batches",
        verl="no verl 0.9.1 trainer passes a value (Megatron passes None)",
    )
    same_micro_num_in_dp: bool = _option(
        True, kind=Kind.SWITCH,
        flag="--same-micro-num-in-dp", agreed=False, verl_parameter=True, static=True,
        doc="with a DP group, every rank runs the same count (one all_reduce)",
        verl="every engine passes True",
    )
    use_dynamic_bsz_balance: bool = _option(
        True, kind=Kind.SWITCH,
        flag="--dynamic-bsz-balance", verl_parameter=True,
        doc="order micro-batches by workload, the lightest at both ends (verl's order)",
        verl="nobody passes it: the default, True",
    )
    heaviest_first: bool = _option(
        False, kind=Kind.SWITCH, flag="--heaviest-first",
        env="SEQLEN_BALANCING_HEAVIEST_FIRST", batch_key="heaviest_first",
        doc="order each rank's micro-batches heaviest first (workload descending, ties by "
        "first index), so an out-of-memory shows at the first; over use_dynamic_bsz_balance",
        verl=_DYNAMIC_PATH + "; takes precedence over verl's balanced order "
        "(use_dynamic_bsz_balance)",
    )
    pad_to_multiple_of: int = _option(
        1, kind=Kind.POSITIVE, flag="--pad-to-multiple-of",
        env="SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", batch_key="pad_to_multiple_of",
        group="cost", none_is_default=True,
        doc="each sample costs its length (or cost) rounded up to a multiple of this (tokens)",
        verl=_DYNAMIC_PATH + "; meaningful where the engine pads each sequence (Megatron THD: "
        "tp*cp*2); the switch does not read verl's tp/cp, export the matching value",
    )
    micro_batch_multiple_of: int = _option(
        1, kind=Kind.POSITIVE,
        flag="--micro-batch-multiple-of", env="SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF",
        batch_key="micro_batch_multiple_of", group="cost", none_is_default=True,
        doc="a micro-batch's total is rounded up to a multiple of this before it meets the cap",
        verl=_DYNAMIC_PATH + "; models FSDP's pad_to_length_bucket, Megatron's bucket, FP8's "
        "total (not read from verl's config)",
    )
    padded: bool = _option(
        False, kind=Kind.SWITCH, flag="--padded", batch_key="padded",
        group="cost",
        doc="for models that run padded tensors: a micro-batch costs rows x its widest row",
        verl="no variable: verl's engines remove padding, and the switch never turns it on",
    )
    max_samples_per_micro_batch: int | None = _option(
        None, kind=Kind.OPTIONAL,
        flag="--max-samples-per-micro-batch", env="SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH",
        batch_key="max_samples_per_micro_batch", group="cost",
        doc="no micro-batch holds more samples (a forced group counts all its samples)",
        verl=_DYNAMIC_PATH + " (ran in torchrun SFT)",
    )
    over_cap: str = _option(
        "raise", kind=Kind.CHOICE, flag="--over-cap",
        env="SEQLEN_BALANCING_OVER_CAP", batch_key="over_cap",
        doc="'raise' (verl's behaviour) or 'alone': a sample over the cap runs in a "
        "micro-batch of its own",
        verl="any dynamic-path call meeting a sample over max_token_len_per_gpu * sp: PPO "
        "when prompt+response can exceed the cap; SFT when data.max_length is above it",
    )
    dummy_micro_batches: bool = _option(
        False, kind=Kind.SWITCH,
        flag="--dummy-micro-batches", env="SEQLEN_BALANCING_DUMMY_MICRO_BATCHES",
        batch_key="dummy_micro_batches",
        doc="a rank with fewer samples than the agreed count runs zero-weight dummies",
        verl="only where a rank can be short: Megatron with virtual pipeline stages; never "
        "in both SFT trainers on FSDP/VeOmni/torchtitan/automodel, nor PPO on those",
    )
    loss_weight_keys: tuple[str, ...] | None = _option(
        None, kind=Kind.KEYS, flag="--loss-weight-keys",
        env="SEQLEN_BALANCING_LOSS_WEIGHT_KEYS", batch_key="loss_weight_keys",
        doc="the entries a dummy zeroes (None: loss_mask and response_mask, those present)",
        verl="only with dummies (the same places); verl's losses weight by loss_mask or "
        "response_mask, the defaults",
    )
    workload_model: WorkloadModel | None = _option(  # noqa: RUF009 (a field(), frozen value)
        None, kind=Kind.MODEL, flag="--workload-model",
        env="SEQLEN_BALANCING_WORKLOAD_MODEL",
        doc="balance on this model's FLOPs instead of verl's 24576*s + s**2 (cap untouched)",
        verl="micro-batch contents and order in every dynamic-path call; with the switch also "
        "calculate_workload (DP balance: PPO's _balance_batch, sft_trainer_ray); the rank "
        "assignment of torchrun sft_trainer only with SEQLEN_BALANCING_BALANCE_STEP",
    )
    equal_rows_per_micro_batch: bool = _option(
        False, kind=Kind.SWITCH,
        flag="--equal-rows-per-micro-batch", env="SEQLEN_BALANCING_EQUAL_ROWS_PER_MICRO_BATCH",
        batch_key="equal_rows_per_micro_batch", group="cost",
        doc="every micro-batch (of every DP rank) holds the same rows: short ones are topped "
        "up with zero-weight filler copies, counted under the cap (pipeline parallelism)",
        verl="every dynamic-path call; of use where an engine takes one micro-batch size for "
        "a step (a pipeline schedule such as Megatron's)",
    )

    micro_batch_fixed_tokens: float = _option(
        819.2, kind=Kind.SHARE,
        flag="--micro-batch-fixed-tokens", env="SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS",
        batch_key="micro_batch_fixed_tokens",
        doc="the fixed cost of one micro-batch in tokens of linear work (T tokens: 24576 x T "
        "in verl's workload), whatever the cap, in the lock-step model: plan_global_batch's "
        "count, the balanced sampler, the reports (docs/step-time.md); a rank's own plan is "
        "at the fewest, whatever its value",
        verl="no verl 0.9.1 code: what plan_global_batch, the sampler and the reports model",
    )

    def __post_init__(self) -> None:
        values, error = _checked({name: getattr(self, name) for name in OPTIONS})
        if error is not None:
            raise error.exception()
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @classmethod
    def parse(
        cls, values: Mapping[str, Any], base: PlanOptions | None = None
    ) -> tuple[PlanOptions, PlanError | None]:
        """``base`` (default ``PlanOptions()``) with ``values`` laid over it, checked.

        Never raises for bad values: the first problem is returned as the error record a DP
        group agrees on, with ``base`` (so that the call can still take part).

        Args:
            values: option name -> value (a value as a keyword takes it).
            base: the options the values override.

        Returns:
            ``(options, None)`` or ``(base, error)``; an unknown name is an
            :class:`~seqlen_balancing.errors.arguments.UnknownOption` error naming it.
        """
        start = cls() if base is None else base
        if not values:
            return start, None  # a PlanOptions is checked when made: nothing laid over it
        for name in values:
            if name not in OPTIONS:
                close = _RENAMED.get(str(name)) or closest_name(str(name), OPTIONS) or ""
                return start, UnknownOption(str(name), close)
        merged = {name: getattr(start, name) for name in OPTIONS} | dict(values)
        checked, error = _checked(merged)
        if error is not None:
            return start, error
        return cls(**checked), None

    @classmethod
    def from_keywords(
        cls,
        options: Any = None,
        verl_parameters: Mapping[str, Any] | None = None,
        keywords: Mapping[str, Any] | None = None,
        base: PlanOptions | None = None,
    ) -> tuple[PlanOptions, PlanError | None]:
        """The options of one call: ``options=`` (else ``base``), then verl's parameters
        that are not at their default, then the keywords given (later wins).

        Args:
            options: the call's ``options=`` (a :class:`~seqlen_balancing.PlanOptions` or ``None``).
            verl_parameters: verl's positional parameters of the call, by name (one at its
                default counts as not given: ``options`` keeps its value).
            keywords: the call's ``**option_keywords``.
            base: the start when ``options`` is ``None`` (default ``PlanOptions()``).

        Returns:
            As :meth:`parse` (``options`` not a :class:`~seqlen_balancing.PlanOptions` is a
            :class:`~seqlen_balancing.errors.arguments.NotPlanOptions` error).
        """
        start = (cls() if base is None else base) if options is None else options
        if not isinstance(start, PlanOptions):
            return cls() if base is None else base, NotPlanOptions(detail=describe(options))
        given = {
            name: value for name, value in (verl_parameters or {}).items()
            if not _is_default(value, OPTION_DEFAULTS[name])
        }
        return cls.parse(given | dict(keywords or {}), start)

    @classmethod
    def from_batch(
        cls, settings: Mapping[str, Any], base: PlanOptions | None = None
    ) -> tuple[PlanOptions, PlanError | None]:
        """The options a batch's settings set (``prepare_micro_batches``): ``settings`` maps
        a batch key (an option's ``batch_key``) to the value stored there, already read out
        of its ``NonTensorData`` (``seqlen_balancing.batch.micro_batches`` does); absent keys keep
        ``base``. As :meth:`parse`."""
        by_key = {opt.batch_key: name for name, opt in OPTIONS.items() if opt.batch_key}
        given = {by_key[key]: value for key, value in settings.items() if key in by_key}
        return cls.parse(given, base)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PlanOptions:
        """The options the ``SEQLEN_BALANCING_*`` variables set
        (:func:`~seqlen_balancing.options.env_values`).

        Raises:
            ValueError: as :func:`~seqlen_balancing.options.env_values`.

        Example:
            >>> PlanOptions.from_env({"SEQLEN_BALANCING_OVER_CAP": "Alone"}).over_cap
            'alone'
        """
        # Each value is checked as its option takes it, and no two variables can contradict
        # each other (force_group_size, the one option a limit is checked against, has none).
        return cls(**env_values(environ))

    @classmethod
    def from_args(cls, namespace: argparse.Namespace) -> PlanOptions:
        """The options given on the command line (the flags of
        :func:`~seqlen_balancing.options.add_arguments`; a flag not given keeps the default).

        Raises:
            TypeError, ValueError: as ``PlanOptions(...)``.
        """
        return cls(**{name: getattr(namespace, name) for name in OPTIONS
                      if getattr(namespace, name, None) is not None})

    def changed(self) -> dict[str, Any]:
        """The options that differ from ``PlanOptions()``, in declaration order."""
        return {
            name: getattr(self, name) for name in OPTIONS
            if getattr(self, name) != OPTION_DEFAULTS[name]
        }

    def describe(self) -> str:
        """The options that differ from verl's behaviour, as ``name=value`` (for logs).

        Example:
            >>> PlanOptions(max_samples_per_micro_batch=2).describe()
            'max_samples_per_micro_batch=2'
            >>> PlanOptions().describe()
            "none (verl's behaviour)"
        """
        shown = ", ".join(f"{name}={_text(value)}" for name, value in self.changed().items())
        return shown or "none (verl's behaviour)"


#: Each option's declaration, by name, in field order.
OPTIONS: dict[str, Option] = {f.name: f.metadata["option"] for f in fields(PlanOptions)}

#: Options renamed with a new unit, old name -> new (the hint of an unknown name or variable):
#: ``micro_batch_overhead`` (a share of ``24576 x max_token_len``) became tokens.
_RENAMED = {"micro_batch_overhead": "micro_batch_fixed_tokens"}

#: Each option's default.
OPTION_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PlanOptions)}


# The class docstring ends with the options, one line each (from the metadata).
_OPTION_LINES = [f"    * ``{name}`` (default ``{OPTION_DEFAULTS[name]!r}``): {opt.doc}."
                 for name, opt in OPTIONS.items()]
PlanOptions.__doc__ = (
    (PlanOptions.__doc__ or "").rstrip()
    + "\n\n    The options, each declared once (docs/options.md has every source):\n\n"
    + "\n".join(_OPTION_LINES) + "\n"
)


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and bool(value == default))


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, WorkloadModel):
        return f"'{value}'"
    return repr(value)


def argument_error(value: Any, argument: str) -> tuple[PlanError | None, int]:
    """``(None, value as int)`` for a positive integer, else ``(error, 0)`` with the error
    every rank can agree on (the optional counts are ``PlanOptions``' to check)."""
    as_int = _integer_or_none(value)
    if as_int is None:
        return NotAnInteger(argument, detail=describe(value)), 0
    if as_int < 1:
        return BelowOne(argument, as_int), 0
    return None, as_int


def _checked(values: Mapping[str, Any]) -> tuple[dict[str, Any], PlanError | None]:
    """Every option of ``values`` (all of them) checked and normalised, or the first error
    (in declaration order), then the checks across options."""
    out: dict[str, Any] = {}
    for name, opt in OPTIONS.items():
        value, error = _check(name, opt, values[name])
        if error is not None:
            return {}, error
        out[name] = value
    limit, group = out["max_samples_per_micro_batch"], out["force_group_size"]
    if limit is not None and limit < group:
        return {}, SampleLimitBelowGroup(limit, group)
    return out, None


def _check(name: str, opt: Option, value: Any) -> tuple[Any, PlanError | None]:
    """One option's value normalised (a plain int, bool, str, tuple or model), or its error."""
    kind = opt.kind
    if kind in (Kind.POSITIVE, Kind.OPTIONAL):
        if value is None and (kind is Kind.OPTIONAL or opt.none_is_default):
            return (None if kind is Kind.OPTIONAL else 1), None
        error, as_int = argument_error(value, name)
        return as_int, error
    if kind is Kind.SWITCH:
        on = as_switch(value)
        if on is None:
            return None, NotASwitch(name, detail=describe(value))
        return on, None
    if kind is Kind.CHOICE:
        if not isinstance(value, str):
            return None, OverCapNotAString(detail=describe(value))
        if value not in OVER_CAP_CHOICES:
            return None, UnknownOverCap(detail=repr(value)[:60])
        return value, None
    return {Kind.KEYS: _keys, Kind.SHARE: _share, Kind.MODEL: _model}[kind](value)


def _share(value: Any) -> tuple[float | None, PlanError | None]:
    """A finite number >= 0 as a float (``micro_batch_fixed_tokens``), or its error."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, OverheadNotANumber(detail=describe(value))
    try:
        as_float = float(value)
    except OverflowError:  # 10**400: beyond a float
        as_float = math.inf
    if not math.isfinite(as_float) or as_float < 0:
        return None, OverheadInvalid(detail=describe(value))
    return as_float, None


def _keys(value: Any) -> tuple[tuple[str, ...] | None, PlanError | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        return (value,), None
    if isinstance(value, Sequence) and value and all(isinstance(k, str) for k in value):
        return tuple(value), None
    return None, LossWeightKeysNotKeys(detail=f"got {describe(value)}")


def _model(value: Any) -> tuple[WorkloadModel | None, PlanError | None]:
    if value is None or isinstance(value, WorkloadModel):
        return value, None
    try:
        if isinstance(value, str):
            return WorkloadModel.parse(value), None
        if isinstance(value, Mapping):
            return WorkloadModel(**value), None
    except (TypeError, ValueError) as exc:
        return None, WorkloadModelInvalid(detail=str(exc)[:120])
    return None, WorkloadModelInvalid(detail=f"got {describe(value)}")


# ----------------------------------------------------------------------------- keywords


class OptionKeywords(TypedDict, total=False):
    """The library's own options, as keywords of the verl-named functions (after verl's
    parameters): ``**option_keywords: Unpack[OptionKeywords]``. Each as in
    :class:`~seqlen_balancing.PlanOptions`; a test keeps these keys equal to its fields."""

    heaviest_first: bool
    pad_to_multiple_of: int | None
    micro_batch_multiple_of: int | None
    padded: bool
    max_samples_per_micro_batch: int | None
    over_cap: str
    dummy_micro_batches: bool
    loss_weight_keys: str | Sequence[str] | None
    workload_model: WorkloadModel | Mapping[str, Any] | str | None
    equal_rows_per_micro_batch: bool
    micro_batch_fixed_tokens: float


class GroupOptionKeywords(OptionKeywords, total=False):
    """:class:`~seqlen_balancing.options.OptionKeywords` and ``force_group_size``: the
    keywords of the functions whose verl signature lacks it (``prepare_micro_batches``,
    ``prepare_dynamic_batch``)."""

    force_group_size: int


class PlanOptionKeywords(GroupOptionKeywords, total=False):
    """Every option as a keyword (the list API: ``plan_micro_batches``,
    ``plan_data_parallel``)."""

    num_batches_divided_by: int | None
    min_num_micro_batch: int | None
    same_micro_num_in_dp: bool
    use_dynamic_bsz_balance: bool


# ----------------------------------------------------------------------------- environment


def env_switch(name: str, text: str) -> bool:
    """A switch variable's value under the one spelling rule: ``1``/``true``/``yes``/``on``
    or ``0``/``false``/``no``/``off``/empty, case-insensitive, spaces around ignored.

    Raises:
        ValueError: any other value (the message names the variable, its value and what is
            accepted).

    Example:
        >>> env_switch("SEQLEN_BALANCING_VERL", " On "), env_switch("SEQLEN_BALANCING_VERL", "")
        (True, False)
    """
    value = _switch_word(text)
    if isinstance(value, bool):
        return value
    raise ValueError(
        f"{name}={_quoted(text)} is not a switch value: it takes 1, true, yes or on, or 0, false, "
        "no, off or empty (any case)"
    )


def step_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The job's own settings that shape a step beyond the plan's options, as every DP rank
    must hold them alike (the agreement's fingerprint carries them): whether
    :data:`ENV_BALANCE_STEP` is on (a value that is not a switch as its stripped,
    lower-cased text: it never raises here, the switch refuses it where it is read).

    Example:
        >>> step_settings({"SEQLEN_BALANCING_BALANCE_STEP": " On "})
        {'SEQLEN_BALANCING_BALANCE_STEP': True}
    """
    env = os.environ if environ is None else environ
    return {ENV_BALANCE_STEP: _switch_word(env.get(ENV_BALANCE_STEP, ""))}


def _switch_word(text: str) -> bool | str:
    """A switch variable's value under the one spelling rule, else its stripped, lower-cased text."""
    word = text.strip().lower()
    return True if word in SWITCH_ON else False if word in SWITCH_OFF else word


def _from_text(kind: Kind, text: str) -> tuple[Any, str]:
    """The value ``text`` spells for an option of ``kind`` (not a switch), or ``None`` and
    why: "" (it spells none), or :meth:`WorkloadModel.parse`'s error for a model shape."""
    if kind in (Kind.POSITIVE, Kind.OPTIONAL):
        # ASCII digits, a leading + allowed, at most 4,000 (where int() refuses with its own error)
        digits = text.strip().removeprefix("+")
        number = int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 4000 else 0
        return (number if number >= 1 else None), ""
    if kind is Kind.CHOICE:
        return (text.lower() if text.lower() in OVER_CAP_CHOICES else None), ""
    if kind is Kind.KEYS:
        keys = tuple(part.strip() for part in text.split(","))
        return (keys if all(keys) else None), ""
    try:
        if kind is Kind.SHARE:
            return _share(float(text))[0], ""
        return WorkloadModel.parse(text), ""
    except (TypeError, ValueError) as exc:  # not a number; not a model shape (its words)
        return None, "" if kind is Kind.SHARE else str(exc)


def _env_value(name: str, opt: Option, text: str) -> Any:
    """One variable's value for its option (``text`` stripped, not empty)."""
    accepted = {
        Kind.POSITIVE: "a positive integer, or empty for 1",
        Kind.OPTIONAL: "a positive integer, or empty for none",
        Kind.CHOICE: "raise or alone (any case), or empty for raise",
        Kind.KEYS: "TensorDict keys separated by commas, or empty for the defaults",
        Kind.MODEL: "key=value pairs separated by commas, e.g. hidden_size=8192,num_layers=80",
        Kind.SHARE: "a finite number >= 0 (tokens), e.g. 819.2",
    }
    if opt.kind is Kind.SWITCH:
        return env_switch(name, text)
    value, problem = _from_text(opt.kind, text)
    if value is None:
        why = f" ({problem})" if problem else ""
        raise ValueError(f"{name}={_quoted(text)} is not accepted{why}: it takes {accepted[opt.kind]}")
    return value


def _quoted(text: str, limit: int = 40) -> str:
    """``text`` quoted for a one-line message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def env_values(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The options the ``SEQLEN_BALANCING_*`` variables set, by option name (only the
    variables set and not empty), every such variable checked.

    Args:
        environ: the variables to read (default ``os.environ``).

    Returns:
        ``{option name: value}``, values as :class:`~seqlen_balancing.PlanOptions` holds them.

    Raises:
        ValueError: one line naming every variable that is unknown (with the prefix but no
            option, e.g. a typo) or whose value is not accepted, its value and what it
            takes; :data:`ENV_SWITCH` and :data:`ENV_BALANCE_STEP` are checked under the
            same spelling rule (and are not options: the result never holds them).

    Example:
        >>> env_values({"SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH": "2", "HOME": "/"})
        {'max_samples_per_micro_batch': 2}
        >>> env_values({"SEQLEN_BALANCING_OVER_CAP": "alnoe"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: SEQLEN_BALANCING_OVER_CAP='alnoe' is not accepted: it takes raise or alone ...
    """
    env = os.environ if environ is None else environ
    by_env = {opt.env: name for name, opt in OPTIONS.items() if opt.env}
    known = sorted([*by_env, *ENV_SWITCHES])
    values: dict[str, Any] = {}
    problems: list[str] = []
    for variable in sorted(key for key in env if key.startswith(ENV_PREFIX)):
        text = env[variable]
        try:
            if variable in ENV_SWITCHES:
                env_switch(variable, text)
            elif variable not in by_env:
                renamed = _RENAMED.get(variable.removeprefix(ENV_PREFIX).lower())
                close = ENV_PREFIX + renamed.upper() if renamed else closest_name(variable, known, ENV_PREFIX)
                hint = f" (did you mean {close}?)" if close else ""
                problems.append(f"{variable} is not a seqlen-balancing variable{hint}; they are "
                                f"{', '.join(known)}")
            elif text.strip():
                values[by_env[variable]] = _env_value(variable, OPTIONS[by_env[variable]], text.strip())
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return values


# ----------------------------------------------------------------------------- command line


def _flag_type(kind: Kind, refused: str) -> Callable[[str], Any]:
    """The argparse ``type`` of a flag of ``kind``: its value, or ``refused`` (``{}``: the
    text quoted) where the text spells none (a model shape: its own error)."""

    def convert(text: str) -> Any:
        value, problem = _from_text(kind, text)
        if value is None:
            raise argparse.ArgumentTypeError(problem or refused.format(_quoted(text)))
        return value

    return convert


def add_arguments(parser: Any, groups: Mapping[str, Any] | None = None) -> None:
    """Add one flag per option to ``parser`` (an argparse parser), each in the group named
    by :attr:`Option.group` when ``groups`` holds it; every flag defaults to ``None`` (not
    given: :meth:`~seqlen_balancing.PlanOptions.from_args` keeps the option's default)."""
    for name, opt in OPTIONS.items():
        target = (groups or {}).get(opt.group, parser)
        default = OPTION_DEFAULTS[name]
        shown = "none" if default is None else str(default).lower() if isinstance(default, bool) else default
        common: dict[str, Any] = {"dest": name, "default": None, "help": f"{opt.doc} (default: {shown})"}
        if opt.kind is Kind.SWITCH:
            target.add_argument(opt.flag, action=argparse.BooleanOptionalAction, **common)
        elif opt.kind is Kind.CHOICE:
            target.add_argument(opt.flag, choices=OVER_CAP_CHOICES, **common)
        else:
            refused = {Kind.KEYS: "must be keys separated by commas, got {}",
                       Kind.SHARE: "{} is not a finite number >= 0"}.get(
                opt.kind, "must be a positive integer, got {}")
            metavar = {Kind.KEYS: "KEY[,KEY...]", Kind.MODEL: "SHAPE",
                       Kind.SHARE: "TOKENS"}.get(opt.kind, "N")
            target.add_argument(opt.flag, type=_flag_type(opt.kind, refused), metavar=metavar, **common)
