"""The ``verl.plugins`` entry point: switch this process when ``SEQLEN_BALANCING_VERL=1``.

verl >= 0.9 imports every entry point of the group ``verl.plugins`` at the end of its own
``__init__``, in every process that imports verl: the driver, the TaskRunner and each Ray
worker. Importing this module calls :func:`seqlen_balancing.verl.apply` when the variable is
``1`` and does nothing when it is unset, empty or ``0``; any other value is refused with a
warning (a job half on ``true`` and half on ``1`` is what must never run).

verl catches an exception from a plugin and logs it at DEBUG only, so a failed switch is
logged here at ERROR before it propagates: a process that asked for the library and did not
get it says so in its log.

With the switch on, the ``seqlen_balancing.verl`` logger is set to INFO (unless it already
has a level), so that its one line per process shows under verl's WARNING logging
configuration.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from seqlen_balancing.verl.switch import apply

__all__ = ["VARIABLE", "switch_from_environment"]

#: The environment variable that turns the switch on (value ``1``).
VARIABLE = "SEQLEN_BALANCING_VERL"

logger = logging.getLogger("seqlen_balancing.verl")


def switch_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Call :func:`~seqlen_balancing.verl.apply` if ``SEQLEN_BALANCING_VERL=1``.

    Args:
        environ: the variables to read; ``os.environ`` by default.

    Returns:
        True when this process is switched.

    Raises:
        RuntimeError: from :func:`~seqlen_balancing.verl.apply`: verl's functions cannot be
            switched (logged at ERROR first).
        ValueError: from :func:`~seqlen_balancing.verl.apply`: a malformed
            ``SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF`` or
            ``SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF`` (logged at ERROR first).

    Example:
        >>> switch_from_environment({"SEQLEN_BALANCING_VERL": "0"})
        False
    """
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    if value in ("", "0"):
        return False
    if value != "1":
        logger.warning(
            "%s=%r is ignored: set it to 1 to run verl on seqlen-balancing, or unset it; this "
            "process stays on verl's own functions", VARIABLE, value,
        )
        return False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        apply()
    except Exception as error:  # logged at ERROR (verl hides plugin errors), then re-raised
        logger.exception("%s=1 but this process could not be switched: %s", VARIABLE, error)
        raise
    return True


switch_from_environment()
