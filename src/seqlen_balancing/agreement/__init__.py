"""How DP ranks agree: the vector and its reading (no torch), and the collectives.

:mod:`~seqlen_balancing.agreement.vector` is pure Python (what the ranks exchange, the
verdict, every rank planned in one process); :mod:`~seqlen_balancing.agreement.collective`
moves it through ``torch.distributed`` (imported only by the batch glue). The names of the
first are re-exported here.
"""

from seqlen_balancing.agreement.vector import *  # noqa: F403  (the room's pure names)
from seqlen_balancing.agreement.vector import __all__ as __all__
