"""Worker of ``test_prefix.py`` (issue 47, item 3): one gloo rank planning with shared
prompts (``prefix_lengths`` beside ``group_ids``, or ``force_group_size``'s groups) through
``rearrange_micro_batches``.

Run as a script, one process per rank (``_world.py``'s ``run_world``)::

    python _prefix_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR
"""

from __future__ import annotations

import sys
from typing import Any

PG_TIMEOUT_S = 30


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """The round's outcome on this rank: the plan, or the exception's type and message."""
    import torch
    from tensordict import NonTensorStack, TensorDict

    from seqlen_balancing import rearrange_micro_batches

    lengths = spec["lengths"]
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    entries = {"attention_mask": mask, "loss_mask": mask.clone(), "prefix": torch.tensor(spec["prefixes"])}
    batch = TensorDict(entries, batch_size=[len(lengths)])
    batch["uid"] = NonTensorStack(*spec["ids"])
    try:
        force = spec.get("force", 1)  # force_group_size's groups instead of the ids
        _, plan = rearrange_micro_batches(batch, spec["cap"], dp_group=group,
                                          group_ids="uid" if force == 1 else None, force_group_size=force,
                                          prefix_lengths="prefix" if spec["shared"] else None,
                                          dummy_micro_batches=True)  # a rank of few prompts
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    return {"plan": [list(part) for part in plan]}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
