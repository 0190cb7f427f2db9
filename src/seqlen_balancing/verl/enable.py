"""Importing this module switches the process's verl onto seqlen-balancing.

For verl 0.6-0.8, which import the modules named in ``VERL_USE_EXTERNAL_MODULES`` on
``import verl`` (and have no ``verl.plugins`` entry points)::

    VERL_USE_EXTERNAL_MODULES=seqlen_balancing.verl.enable python -m verl.trainer.main_ppo ...

The variable must reach every process (docs/verl.md). Also usable as a
plain ``import seqlen_balancing.verl.enable`` at the top of a script. Unlike the plugin, it
does not read ``SEQLEN_BALANCING_VERL``: naming the module is the request.
"""

from __future__ import annotations

import logging

from seqlen_balancing.verl.switch import apply

_logger = logging.getLogger("seqlen_balancing.verl")
if _logger.level == logging.NOTSET:
    _logger.setLevel(logging.INFO)  # the one line per process shows under verl's WARNING config
apply()
