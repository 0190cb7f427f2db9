"""Worker of ``test_oracle.py``: one gloo rank that plays the rounds it is given.

Run as a script, one process per rank::

    python _oracle_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

``ROUNDS_JSON`` holds a list of rounds; each round gives every rank its lengths and
arguments. For each round this rank builds a padded TensorDict from its lengths, calls the
entry point with ``dp_group`` set to the world group, and appends one JSON line to
``OUT_DIR/rank{RANK}.jsonl`` (flushed at once): the exception type and message, or the
micro-batches' row indices and their token counts read from each micro-batch's own
attention mask. A fence (``all_gather_object`` of the round number) follows every round, so
a rank that skipped or repeated a collective shows up as a desync rather than a shifted
result. The expected outcomes are computed by the test, not here.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
from pathlib import Path
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


def main(argv: list[str]) -> int:
    rounds_path, rank, world_size, init_method, out_dir = (
        Path(argv[0]), int(argv[1]), int(argv[2]), argv[3], Path(argv[4]),
    )
    import torch.distributed as dist

    rounds = json.loads(rounds_path.read_text(encoding="utf-8"))
    with (out_dir / f"rank{rank}.jsonl").open("a", encoding="utf-8") as out:

        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())

        try:
            dist.init_process_group(
                "gloo", init_method=init_method, rank=rank, world_size=world_size,
                timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
            )
            try:
                for number, round_ in enumerate(rounds):
                    record = play(round_["ranks"][rank], dist.group.WORLD)
                    write({"round": number, **record})
                    seen: list[Any] = [None] * world_size
                    dist.all_gather_object(seen, number)
                    if seen != [number] * world_size:
                        write({"round": "__desync__", "seen": seen})
                        return 3
            finally:
                dist.destroy_process_group()
        except BaseException:
            write({"round": "__harness_error__", "traceback": traceback.format_exc()})
            return 2
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Every record is fsynced and the group destroyed; skip interpreter teardown, where a
    # gloo worker thread still alive can abort the process (SIGABRT, "terminate called
    # without an active exception") after the work is done.
    os._exit(code)
