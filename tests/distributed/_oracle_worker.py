"""Worker of ``test_oracle.py``: one gloo rank that plays the rounds it is given.

Run as a script, one process per rank::

    python _oracle_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

``ROUNDS_JSON`` holds a list of rounds; each round gives every rank its lengths and
arguments. For each round this rank builds a padded TensorDict from its lengths, calls the
entry point with ``dp_group`` set to the world group, and appends one JSON line to
``OUT_DIR/rank{RANK}.jsonl`` (flushed at once): the exception type and message, or the
micro-batches' row indices and their token counts read from each micro-batch's own
attention mask (the rounds and the fence after each: ``_world.py``). The expected outcomes
are computed by the test, not here.
"""

from __future__ import annotations

import sys
from typing import Any

#: Seconds a gloo collective may wait before it raises (a hang becomes an error).
PG_TIMEOUT_S = 60

#: Keyword-only cost settings a round may give ``rearrange_micro_batches``.
COST_KEYS = ("pad_to_multiple_of", "micro_batch_multiple_of", "costs")


def _batch(lengths: list[int], left_pad: bool) -> Any:
    import torch
    from tensordict import TensorDict

    n = len(lengths)
    width = max([*lengths, 1]) + 2
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        if left_pad and row % 2:
            mask[row, width - length :] = 1
        else:
            mask[row, :length] = 1
    return TensorDict({"attention_mask": mask, "row": torch.arange(n)}, batch_size=[n])


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One call of the entry point; its outcome as plain data."""
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches, rearrange_micro_batches

    batch = _batch(spec["lengths"], spec["left_pad"])
    common = {
        "dp_group": group,
        "num_batches_divided_by": spec["num_batches_divided_by"],
        "min_num_micro_batch": spec["min_num_micro_batch"],
        "use_dynamic_bsz_balance": spec["use_dynamic_bsz_balance"],
    }
    try:
        if spec["entry"] == "prepare_micro_batches":
            batch["max_token_len_per_gpu"] = NonTensorData(spec["max_token_len"])
            batch["force_group_size"] = NonTensorData(spec["force_group_size"])
            micro_batches, plan = prepare_micro_batches(batch, **common)
        else:
            # the cost settings, where a round gives them (tests/test_cost_rule.py)
            cost = {key: spec[key] for key in COST_KEYS if key in spec}
            micro_batches, plan = rearrange_micro_batches(
                batch, spec["max_token_len"], force_group_size=spec["force_group_size"], **common,
                **cost,
            )
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    return {
        "plan": plan,
        "rows": [[int(r) for r in mb["row"]] for mb in micro_batches],
        "tokens": [int(mb["attention_mask"].sum()) for mb in micro_batches],
    }


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
