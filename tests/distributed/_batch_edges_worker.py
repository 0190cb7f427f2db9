"""Worker of ``test_batch_edges.py`` (issue 46 items 7 and 10): one gloo rank per process.

Run as a script, one process per rank (``_world.py``'s ``run_world``)::

    python _batch_edges_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

Each round gives the rank a batch (its lengths, and whether it holds a uint32 entry or
sets ``use_prefix_tree``) and an entry point, called with ``dp_group`` set to the world;
the outcome is recorded as plain data (the uint32 entry's rows by micro-batch), the test
judges it.
"""

from __future__ import annotations

import sys
from typing import Any

PG_TIMEOUT_S = 30


def _batch(spec: dict[str, Any]) -> Any:
    import torch
    from tensordict import NonTensorData, TensorDict

    lengths = spec["lengths"]
    n = len(lengths)
    mask = torch.tensor([[1] * k + [0] * (8 - k) for k in lengths])
    batch = TensorDict({"attention_mask": mask, "input_ids": mask * 5}, batch_size=[n])
    if spec.get("uint32"):  # bit patterns above 2**31: wrong as int32 values, right as bits
        batch["u"] = (torch.arange(n, dtype=torch.int64) + (3 << 30)).to(torch.uint32)
    if spec["entry"] == "prepare":
        batch["max_token_len_per_gpu"] = NonTensorData(spec["cap"])
        if "prefix_tree" in spec:
            batch["use_prefix_tree"] = NonTensorData(spec["prefix_tree"])
        if spec.get("static"):
            batch["use_dynamic_bsz"] = NonTensorData(False)
            batch["micro_batch_size_per_gpu"] = NonTensorData(2)
    return batch


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One call of the entry point; its outcome as plain data."""
    from _malformed import Proto  # the DataProto stand-in, beside this script

    from seqlen_balancing import prepare_dynamic_batch, prepare_micro_batches, rearrange_micro_batches

    batch = _batch(spec)
    try:
        if spec["entry"] == "prepare":
            micro_batches, plan = prepare_micro_batches(batch, dp_group=group)
        elif spec["entry"] == "dynamic":
            parts, plan = prepare_dynamic_batch(Proto(batch), spec["cap"], dp_group=group)
            micro_batches = [part.batch for part in parts]
        else:
            micro_batches, plan = rearrange_micro_batches(batch, spec["cap"], dp_group=group)
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    held = [[int(x) for x in mb["u"].tolist()] for mb in micro_batches] if "u" in batch.keys() else None
    return {"count": len(micro_batches), "plan": [list(part) for part in plan or []], "u": held}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
