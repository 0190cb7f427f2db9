"""Switch a running verl onto this library: :func:`apply` and :func:`revert`.

verl's trainers and engines bind the functions of ``verl.utils.seqlen_balancing`` and
``verl.workers.engine.utils.prepare_micro_batches`` at import time (17 bindings in 9 modules
in verl 0.9.1), so setting attributes on ``verl.utils.seqlen_balancing`` after import misses
them. :func:`apply` replaces the 13 functions where verl defines them and every binding of
them in an imported ``verl.*`` module, and installs a post-import hook
(:class:`~seqlen_balancing.verl.hook.PostImportFinder`) that does the same to each verl module
imported later, right after its code ran. A record of every replacement (module, name, verl's
function) makes :func:`revert` exact.

The functions are checked before anything changes: verl's parameters (names, kinds, order,
defaults) must be a prefix of the library's, and the library's extra parameters keyword-only
with defaults (:mod:`seqlen_balancing.verl.signatures`). A verl module not imported yet is
checked from its source, so :func:`apply` imports no verl module: it runs inside verl's own
``__init__`` (the ``verl.plugins`` entry point, :mod:`seqlen_balancing.verl.plugin`).

At import, only the standard library and the library's torch-free core (which the package's
root loads anyway); the library's torch functions are loaded by :func:`apply`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.options import ENV_SWITCH, PlanOptions, env_values
from seqlen_balancing.verl import balance_step, signatures
from seqlen_balancing.verl.hook import PostImportFinder, put_back

__all__ = [
    "SUPPORTED_VERL",
    "VERL_FUNCTIONS",
    "Replacement",
    "apply",
    "options_from_env",
    "replacements",
    "revert",
]

logger = logging.getLogger("seqlen_balancing.verl")

#: Where verl defines the functions the switch replaces, and their names.
VERL_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "verl.utils.seqlen_balancing": (
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
    ),
    "verl.workers.engine.utils": ("prepare_micro_batches",),
}

#: verl releases whose 13 signatures are known to match (others are checked, and warned of).
SUPPORTED_VERL = ("0.7.1", "0.8.0", "0.9.0", "0.9.1")


@dataclass(frozen=True)
class Replacement:
    """One binding the switch holds: ``module.name`` was ``original`` and is ``replacement``.

    ``on_import`` is true for a binding the module made itself while the switch was on
    (``from verl.utils.seqlen_balancing import ceildiv`` after the switch): nothing was
    replaced there, but :func:`revert` gives it verl's function back all the same.
    """

    module: str
    name: str
    original: Callable[..., Any]
    replacement: Callable[..., Any]
    on_import: bool = False


@dataclass
class _State:
    """The switch of this process (one per process; guarded by ``lock``)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    finder: PostImportFinder | None = None
    records: dict[tuple[str, str], Replacement] = field(default_factory=dict)
    # each keeps alive the function whose id keys the other: an equal id is the same object
    forward: dict[int, Callable[..., Any]] = field(default_factory=dict)  # id(verl's function) -> ours
    back: dict[int, Callable[..., Any]] = field(default_factory=dict)  # id(ours) -> verl's function
    ours: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # the options of the environment, in force while switched
    options: PlanOptions = field(default_factory=PlanOptions)


_STATE = _State()


#: The functions that take the options: the options of the environment reach them.
_WITH_OPTIONS = ("rearrange_micro_batches", "prepare_dynamic_batch", "prepare_micro_batches")


def options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The options a switched verl job's micro-batch functions get by default from the
    ``SEQLEN_BALANCING_*`` variables (only those set; the caller's own keywords win, and
    verl passes none of them): :func:`~seqlen_balancing.options.env_values`, every
    variable checked. docs/verl.md lists the variables and where each can act.

    Set them in the driver's environment and in Ray's ``runtime_env.env_vars``: every DP
    rank must plan with the same options (the agreement checks it).

    Args:
        environ: the mapping to read (default ``os.environ``).

    Returns:
        ``{option: value}`` for the variables set.

    Raises:
        ValueError: an unknown ``SEQLEN_BALANCING_*`` name, or a value a variable cannot
            take (one line naming each, its value and what it takes).

    Example:
        >>> options_from_env({"SEQLEN_BALANCING_OVER_CAP": "alone"})
        {'over_cap': 'alone'}
    """
    values = env_values(environ)
    PlanOptions(**values)  # the checks across options (none of them can fail today)
    return values


def _library_functions() -> dict[str, Callable[..., Any]]:
    """The library's 13 functions; the three micro-batch functions get the options of the
    environment (:func:`options_from_env`) as defaults of the keywords the call does not
    pass (verl never passes them), and with a workload model ``calculate_workload`` returns
    that model's.

    ``padded`` has no variable: its cut is for callers that restore per-micro-batch outputs
    themselves, verl's engines join them into one tensor first, and one process-wide value
    would serve remove-padding engines too (docs/padded.md), so the switch never turns it
    on."""
    import seqlen_balancing  # torch and tensordict load here (verl has loaded them already)

    ours = {name: getattr(seqlen_balancing, name) for group in VERL_FUNCTIONS.values() for name in group}
    options = options_from_env()
    ours.update({name: _with_options(ours[name], options) for name in _WITH_OPTIONS if options})
    if "workload_model" in options:
        ours["calculate_workload"] = _model_calculate_workload(
            ours["calculate_workload"], options["workload_model"])
    _STATE.options = PlanOptions(**options)
    return ours


def _with_options(function: Callable[..., Any], options: dict[str, Any]) -> Callable[..., Any]:
    """``function`` with ``options`` as defaults for the keywords the call does not pass
    (same signature: ``functools.wraps``). A ``prepare_micro_batches`` call on the static
    path (``use_dynamic_bsz`` false) gets none: the job's settings are for capped
    micro-batches, and the static path refuses cost settings given to it."""

    @functools.wraps(function)
    def with_options(*args: Any, **kwargs: Any) -> Any:
        if function.__name__ != "prepare_micro_batches" or _dynamic(args[0] if args else kwargs.get("data")):
            kwargs = {**options, **kwargs}  # the call's own keywords win
        return function(*args, **kwargs)

    return with_options


def _model_calculate_workload(function: Callable[..., Any], model: WorkloadModel) -> Callable[..., Any]:
    """``calculate_workload`` on the model's formula: the input checked as verl's formula
    checks it (``function`` on it), the result the model's workloads, int64 as verl's."""

    @functools.wraps(function)
    def calculate_workload(seqlen_list: Any) -> Any:
        import torch

        checked = function(seqlen_list)  # the same checks and errors as verl's formula
        lengths = [int(v) for v in torch.as_tensor(seqlen_list).reshape(-1).tolist()]
        values = torch.tensor(model.workloads(lengths), dtype=torch.int64)
        if isinstance(checked, torch.Tensor):  # verl's dtype (float for float input), device
            return values.reshape(checked.shape).to(device=checked.device, dtype=checked.dtype)
        # a NumPy array or scalar: its shape and dtype
        out = values.numpy().reshape(checked.shape).astype(checked.dtype)
        return out[()] if out.ndim == 0 else out

    return calculate_workload


def _dynamic(data: Any) -> bool:
    """Whether ``prepare_micro_batches`` takes its dynamic path on ``data`` (True when the
    setting cannot be read: the call then reports that itself, through the agreement)."""
    from seqlen_balancing._checks import as_switch
    from seqlen_balancing.batch.micro_batches import _setting

    try:
        return as_switch(_setting(data, "use_dynamic_bsz", True)) is not False
    except Exception:  # any unreadable batch: the library's call names the problem
        return True


def _verl_version() -> str:
    version = getattr(sys.modules.get("verl"), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def _verl_root() -> Path:
    """verl's package folder, found without importing verl (it may be importing us)."""
    paths = list(getattr(sys.modules.get("verl"), "__path__", []) or [])
    if not paths:
        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(
                "seqlen_balancing.verl: verl is not installed in this environment "
                f"({sys.executable}); nothing was replaced. Install verl, or do not set "
                f"{ENV_SWITCH}"
            )
        paths = list(spec.submodule_search_locations)
    return Path(paths[0])


def _check(ours: dict[str, Callable[..., Any]], module_names: Iterable[str]) -> None:
    """Raise ``RuntimeError`` if one of verl's functions in these modules does not fit ours.

    A loaded module is read with :mod:`inspect`, one not imported yet from its source file;
    a module this verl lacks (an older layout) has nothing to switch and is skipped.
    """
    for module_name in module_names:
        module = sys.modules.get(module_name)
        where = module if module is not None else \
            _verl_root().joinpath(*module_name.split(".")[1:]).with_suffix(".py")
        if isinstance(where, ModuleType) or where.is_file():
            for name in VERL_FUNCTIONS[module_name]:
                mine = signatures.from_function(ours[name])
                theirs, problem = _misfit(where, name, mine)
                if problem:
                    raise RuntimeError(
                        f"seqlen_balancing.verl cannot switch verl {_verl_version()}: {module_name}.{name}"
                        f"{theirs} does not fit seqlen_balancing.{name}{signatures.render(mine)} "
                        f"({problem}); nothing was replaced. Supported verl releases: "
                        f"{', '.join(SUPPORTED_VERL)}; install one of them, or unset "
                        "SEQLEN_BALANCING_VERL to run on verl's own functions in every process."
                    )


def _misfit(where: ModuleType | Path, name: str, mine: list[signatures.Parameter]) -> tuple[str, str]:
    """verl's signature of ``name`` as the refusal shows it, and why it does not fit ``mine``
    (empty: it fits). Read from its loaded module (verl's own function where it is already
    switched) or from the module's source file; missing or not callable, or unreadable (a
    builtin or compiled function, a source that cannot be parsed), it does not fit."""
    if isinstance(where, Path):
        try:
            params = signatures.from_source(where, name)
        except (OSError, SyntaxError, ValueError) as error:
            return "(source unreadable)", f"its source {where} cannot be read: {error}"
    else:
        value = getattr(where, name, None)
        function = _STATE.back.get(id(value), value)
        try:
            params = signatures.from_function(function) if callable(function) else None
        except (ValueError, TypeError) as error:
            return "(signature unreadable)", f"its signature cannot be read: {error}"
    if params is None:
        return "(missing)", "verl does not define it as a function"
    return signatures.render(params), signatures.prefix_problem(params, mine) or ""


def _bind(module: ModuleType, name: str, original: Callable[..., Any], on_import: bool) -> None:
    replacement = _STATE.forward[id(original)]
    if not on_import:
        setattr(module, name, replacement)
    _STATE.records.setdefault(
        (module.__name__, name), Replacement(module.__name__, name, original, replacement, on_import)
    )


def _switch_loaded() -> None:
    """Pair verl's functions where it defines them (the loaded modules of
    :data:`VERL_FUNCTIONS`) with the library's, then give every binding of one of them in a
    loaded verl module ours (:func:`_rebind`; import cycles may have bound verl's already)."""
    loaded = _loaded_verl_modules()
    for module in loaded:
        for name in VERL_FUNCTIONS.get(module.__name__, ()):
            current = getattr(module, name)
            if id(current) in _STATE.back:
                continue  # already ours
            _STATE.forward[id(current)] = _STATE.ours[name]
            _STATE.back[id(_STATE.ours[name])] = current
    for module in loaded:
        _rebind(module)


def _rebind(module: ModuleType) -> None:
    """Give every binding of one of verl's replaced functions in ``module`` the library's."""
    for name, value in list(vars(module).items()):
        if id(value) in _STATE.forward:
            _bind(module, name, value, on_import=False)
        elif id(value) in _STATE.back:
            _bind(module, name, _STATE.back[id(value)], on_import=True)


def _loaded_verl_modules() -> list[ModuleType]:
    return [
        module for name, module in list(sys.modules.items())
        if (name == "verl" or name.startswith("verl.")) and isinstance(module, ModuleType)
    ]


def _on_import(module: ModuleType) -> None:
    """The post-import hook: a verl module has just executed."""
    with _STATE.lock:
        if _STATE.finder is None:
            return
        if module.__name__ in VERL_FUNCTIONS:
            try:
                _check(_STATE.ours, [module.__name__])  # from the loaded functions this time
            except RuntimeError:  # the import fails; say so where verl's logs are read
                logger.exception("seqlen-balancing could not switch %s on import", module.__name__)
                raise
            _switch_loaded()
            logger.info(
                "seqlen-balancing switched %s on import in process %d: %s",
                module.__name__, os.getpid(), ", ".join(VERL_FUNCTIONS[module.__name__]),
            )
        else:
            _rebind(module)
            logger.debug("seqlen-balancing: %s imported while switched", module.__name__)
        balance_step.on_import(module)


def replacements() -> list[tuple[str, str]]:
    """Every ``(module, name)`` of verl that holds the library's function because of the switch.

    Returns:
        Sorted pairs; empty when the switch is off.

    Example:
        >>> replacements()
        []
    """
    with _STATE.lock:
        return sorted(_STATE.records)


def apply() -> list[tuple[str, str]]:
    """Run this process's verl on the library: replace verl's 13 functions everywhere.

    Replaces, in ``verl.utils.seqlen_balancing``: ``calculate_workload``, ``karmarkar_karp``,
    ``greedy_partition``, ``get_seqlen_balanced_partitions``, ``log_seqlen_unbalance``,
    ``ceildiv``, ``roundup_divisible``, ``rearrange_micro_batches``, ``get_reverse_idx``,
    ``prepare_dynamic_batch``, ``restore_dynamic_batch``, ``get_group_balanced_partitions``;
    in ``verl.workers.engine.utils``: ``prepare_micro_batches``; and every binding of one of
    verl's originals in an imported ``verl.*`` module (``ray_trainer``, ``trainer_base``,
    ``sft_trainer_ray``, the FSDP, Megatron, automodel, VeOmni and torchtitan engines in
    verl 0.9.1). verl modules imported later are switched as they are imported. Engines a
    verl install cannot import are never imported, hence never touched.

    A refusal (see Raises) replaces nothing and installs no import hook: the process stays
    on verl's own functions.

    Idempotent: a second call changes nothing. Logs at INFO, once per switch-on, the process,
    the verl version, the options in force (those the ``SEQLEN_BALANCING_*`` variables
    set) and what was replaced (docs/verl.md shows the lines). Every DP rank of a
    job must be switched, or none: docs/verl.md, "Never run a partially switched job".

    Returns:
        ``(module, name)`` of every binding the switch now holds (:func:`replacements`).

    Raises:
        RuntimeError: verl is not installed, or one of verl's 13 functions is missing, is
            not a function, has a signature that cannot be read (a builtin or compiled
            function, a source file that cannot be parsed) or does not have a prefix of the
            library's signature. The message names the function (``module.name``), both
            signatures (``(signature unreadable)`` for verl's when it cannot be read) and
            the verl version, and says that nothing was replaced.
        ValueError: a ``SEQLEN_BALANCING_*`` variable is unknown (a typo) or set to a value
            it cannot take (:func:`~seqlen_balancing.options.env_values`, checked in every process that calls
            this; one line naming the variable, its value and what it takes, and saying that
            nothing was replaced).

    Example:
        >>> import seqlen_balancing.verl
        >>> seqlen_balancing.verl.apply()  # doctest: +SKIP
        [('verl.utils.seqlen_balancing', 'calculate_workload'), ...]

    References:
        OpenTelemetry's ``instrument()``/``uninstrument()`` and ddtrace's ``patch()``: an
        explicit pair, a record of each replacement, post-import hooks.
    """
    with _STATE.lock:
        if _STATE.finder is not None:
            return sorted(_STATE.records)
        try:
            ours = _library_functions()
            _check(ours, VERL_FUNCTIONS)
            step = balance_step.requested()
        except ValueError as error:  # a bad variable stays a ValueError; say that nothing changed
            raise ValueError(
                f"seqlen_balancing.verl cannot switch verl {_verl_version()}: {error}; nothing was "
                "replaced"
            ) from None
        _STATE.ours = ours
        _switch_loaded()
        if step:
            balance_step.enable(_STATE.options)
        _STATE.finder = PostImportFinder(("verl",), _on_import)
        _STATE.finder.install()
        version = _verl_version()
        if version not in SUPPORTED_VERL:
            logger.warning(
                "seqlen-balancing: verl %s is not among the releases it was tested with (%s); "
                "the 13 signatures matched", version, ", ".join(SUPPORTED_VERL),
            )
        done = sorted(_STATE.records)
        logger.info(
            "seqlen-balancing %s switched on for verl %s in process %d on %s, options in force: "
            "%s%s; %d bindings replaced now%s; verl modules imported later are switched on import",
            sys.modules["seqlen_balancing"].__version__, version, os.getpid(), socket.gethostname(),
            _STATE.options.describe(),
            "; SEQLEN_BALANCING_BALANCE_STEP is on: the step is balanced across DP ranks only by a "
            "process that builds torchrun sft_trainer's train sampler or runs PPO's _balance_batch, "
            "each saying so when it does (never by a Ray worker: it does not choose its rows; "
            "sft_trainer_ray's driver says why it does not)" if step else "", len(done),
            "".join(f"\n  {module}.{name}" for module, name in done),
        )
        return done


def revert() -> list[tuple[str, str]]:
    """Give every binding :func:`apply` changed (or saw made) verl's own function back.

    Removes the import hook. A binding someone else changed after the switch is left as it
    is. Idempotent: with the switch off, does nothing.

    Returns:
        ``(module, name)`` of each binding restored.

    Example:
        >>> revert()
        []
    """
    with _STATE.lock:
        if _STATE.finder is None:
            return []
        _STATE.finder.uninstall()
        _STATE.finder = None
        balance_step.disable()
        for module in _loaded_verl_modules():  # bindings made after the last record, if any
            _rebind(module)
        restored = [key for key, r in sorted(_STATE.records.items(), reverse=True)
                    if put_back(sys.modules.get(r.module), r.name, r.original, r.replacement)]
        _STATE.records.clear()
        _STATE.forward.clear()
        _STATE.back.clear()
        logger.info("seqlen-balancing switched off in process %d: %d bindings restored", os.getpid(),
                    len(restored))
        return sorted(restored)
