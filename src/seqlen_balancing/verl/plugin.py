"""The ``verl.plugins`` entry point: switch this process when ``SEQLEN_BALANCING_VERL`` is on.

verl >= 0.9 imports every entry point of the group ``verl.plugins`` at the end of its own
``__init__``, in every process that imports verl: the driver, each torchrun rank, the
TaskRunner and each Ray worker. Importing this module reads the environment once:

* ``SEQLEN_BALANCING_VERL`` on (``1``, ``true``, ``yes``, ``on``, any case): calls
  :func:`seqlen_balancing.verl.apply`, which checks every ``SEQLEN_BALANCING_*`` variable;
* off (``0``, ``false``, ``no``, ``off``, empty or unset): verl's own functions run; only
  the names of the ``SEQLEN_BALANCING_*`` variables are checked (an unknown one is a typo,
  perhaps of the switch itself), and a warning says when option variables are set for
  nothing.

Anything else stops the process at ``import verl``, before any model is loaded, with one
line on stderr naming the variable, its value and what it takes: an unknown value or name,
a bad option value, or a verl whose functions cannot be switched. verl 0.9.1 catches an
``Exception`` from a plugin and logs it at DEBUG only (``verl/__init__.py``), which would
leave this process on verl's functions while its peers run on the library; so the plugin
raises :class:`SystemExit` with the message (never an empty one, whose exit status 0 would
look like success). Under torchrun the other ranks are then stopped by torchrun; under Ray
the worker dies and the driver's call fails naming the message.

With the switch on, the ``seqlen_balancing.verl`` logger is set to INFO (unless it already
has a level), so that its one line per process shows under verl's WARNING logging
configuration.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from seqlen_balancing.options import ENV_PREFIX, ENV_SWITCH, env_switch, env_values
from seqlen_balancing.verl.switch import apply

__all__ = ["VARIABLE", "switch_from_environment"]

#: The environment variable that turns the switch on.
VARIABLE = ENV_SWITCH

logger = logging.getLogger("seqlen_balancing.verl")


def _stop(problem: str) -> SystemExit:
    """The exit that stops this process, with one line saying why."""
    return SystemExit(f"seqlen-balancing: {problem}; this process stops here, before verl runs "
                      "any part of the job on mismatched functions")


def _names_checked(env: Mapping[str, str]) -> None:
    """With the switch off: refuse unknown ``SEQLEN_BALANCING_*`` names (the values act only
    with the switch on) and warn of option variables that are set for nothing."""
    names = {key: "" for key in env if key.startswith(ENV_PREFIX)}
    env_values(names)  # empty values: only the names are checked
    set_for_nothing = sorted(key for key in names if key != VARIABLE and env[key].strip())
    if set_for_nothing:
        logger.warning(
            "%s is not on, so %s do nothing: verl runs on its own functions in process %d",
            VARIABLE, ", ".join(set_for_nothing), os.getpid(),
        )


def switch_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Call :func:`~seqlen_balancing.verl.apply` if ``SEQLEN_BALANCING_VERL`` is on.

    Args:
        environ: the variables to read; ``os.environ`` by default.

    Returns:
        True when this process is switched, False when the switch is off.

    Raises:
        SystemExit: with one line naming the problem: ``SEQLEN_BALANCING_VERL`` set to a
            value that is not a switch, an unknown ``SEQLEN_BALANCING_*`` name, and with
            the switch on a bad option value or verl functions that cannot be switched
            (from :func:`~seqlen_balancing.verl.apply`, logged at ERROR first).

    Example:
        >>> switch_from_environment({"SEQLEN_BALANCING_VERL": "off"})
        False
    """
    env = os.environ if environ is None else environ
    try:
        on = env_switch(VARIABLE, env.get(VARIABLE, ""))
        if not on:
            _names_checked(env)
    except ValueError as error:
        raise _stop(str(error)) from None
    if not on:
        return False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        apply()
    except Exception as error:  # verl would hide it: log it, then stop this process
        logger.error("%s is on but this process could not be switched: %s", VARIABLE, error)
        raise _stop(str(error)) from error
    return True


switch_from_environment()
