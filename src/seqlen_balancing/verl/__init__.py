"""Everything about verl itself: switch a running verl onto this library, in every process.

verl's trainers and engines call ``verl.utils.seqlen_balancing`` and
``verl.workers.engine.utils.prepare_micro_batches`` in the driver and in every Ray worker.
:func:`apply` replaces those 13 functions, wherever verl has bound them, with this
library's; :func:`revert` gives verl its own back. Nothing happens on import of this package
or of :mod:`seqlen_balancing`: a process is switched only when asked to,

- by the ``verl.plugins`` entry point (:mod:`seqlen_balancing.verl.plugin`, verl >= 0.9
  loads it on ``import verl`` in every process) with ``SEQLEN_BALANCING_VERL=1``;
- by ``VERL_USE_EXTERNAL_MODULES=seqlen_balancing.verl.enable`` (verl 0.6-0.8), or by
  importing :mod:`seqlen_balancing.verl.enable`;
- or by calling :func:`apply`.

A job must be switched in every process or in none (docs/verl.md).
verl's own micro-batch count rule, re-implemented for comparisons, stays in
:mod:`seqlen_balancing.planning.verl_rule` (the command line's ``--compare-verl``).

Example:
    >>> import seqlen_balancing.verl as switch
    >>> switch.replacements()  # nothing is switched until apply() is called
    []
"""

from seqlen_balancing.verl.switch import SUPPORTED_VERL, Replacement, apply, replacements, revert

__all__ = ["SUPPORTED_VERL", "Replacement", "apply", "replacements", "revert"]
