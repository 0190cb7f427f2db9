"""How DP ranks agree: the vector and its reading (no torch), and the collectives.

:mod:`~seqlen_balancing.agreement.vector` is pure Python (what the ranks exchange, the
verdict, every rank planned in one process); :mod:`~seqlen_balancing.agreement.collective`
moves it through ``torch.distributed`` (imported only by the batch glue). The names of the
first are re-exported here.
"""

from seqlen_balancing.agreement.vector import (
    LAYOUT,
    VECTOR_SIZE,
    Layout,
    RankPlan,
    Report,
    Setting,
    Slot,
    agree_in_process,
    analyse_with_prefixes,
    combine,
    decode,
    decode_rows,
    encode,
    encode_rows,
    fingerprint,
    needs_reports,
    plan_data_parallel,
    plan_ranks,
    report,
    settings_of,
)

__all__ = [
    "LAYOUT",
    "VECTOR_SIZE",
    "Layout",
    "RankPlan",
    "Report",
    "Setting",
    "Slot",
    "agree_in_process",
    "analyse_with_prefixes",
    "combine",
    "decode",
    "decode_rows",
    "encode",
    "encode_rows",
    "fingerprint",
    "needs_reports",
    "plan_data_parallel",
    "plan_ranks",
    "report",
    "settings_of",
]
