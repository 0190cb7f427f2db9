"""Worker of ``test_options.py`` (issue 30): one gloo rank playing the rounds it is given.

Run as a script, one process per rank::

    python _options_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

Each round gives every rank one call: the entry point (``rearrange``,
``prepare`` or ``dynamic``), the lengths, the cap, the keyword options, the batch
settings (``prepare``) and the per-sample data, described in JSON and built here (a
callable of the caller's own, e.g. ``map(table.__getitem__, lengths)``, cannot travel as
JSON). The rank calls the entry point with ``dp_group`` set to the world group and appends
one JSON line to ``OUT_DIR/rank{RANK}.jsonl``: the exception type and message, or the count
and the plan. A fence follows every round (``_world.py``), so a rank left in a collective or
one collective too many shows up as a hang or a desync.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

PG_TIMEOUT_S = 60


class RaisingCosts:
    """A sequence of costs whose reading raises (a caller's lazy container)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if index >= self.n:
            raise IndexError(index)
        raise ZeroDivisionError("the caller's cost model divided by zero")


Sequence.register(RaisingCosts)


def _batch(lengths: list[int]) -> Any:
    import torch
    from tensordict import TensorDict

    n = len(lengths)
    width = max([*lengths, 1])
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return TensorDict({"attention_mask": mask, "loss_mask": mask.clone(), "w": mask.float(),
                       "row": torch.arange(n)}, batch_size=[n])


def _per_sample(spec: Any, lengths: list[int]) -> Any:
    """The per-sample data a spec describes (a list, a mapping, a raising container, or a
    callable whose result raises while it is iterated)."""
    if spec is None or isinstance(spec, list):
        return spec
    kind = spec["kind"]
    if kind == "dict":
        return {i: value for i, value in enumerate(spec["values"])}
    if kind == "raising":
        return RaisingCosts(len(lengths))
    table = {int(k): v for k, v in spec["table"].items()}
    return lambda found: map(table.__getitem__, found)  # KeyError for a length not in it


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One call of the entry point; its outcome as plain data."""
    import torch
    from _malformed import Proto  # the DataProto stand-in, beside this script
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_dynamic_batch, prepare_micro_batches, rearrange_micro_batches

    lengths = spec["lengths"]
    batch = _batch(lengths)
    keywords = dict(spec.get("keywords", {}))
    costs = _per_sample(spec.get("costs"), lengths)
    workloads = _per_sample(spec.get("workloads"), lengths)
    try:
        if spec["entry"] == "prepare":
            batch["max_token_len_per_gpu"] = NonTensorData(spec["cap"])
            for key, value in spec.get("settings", {}).items():
                batch[key] = NonTensorData(value)
            for key, values in (("costs", costs), ("workloads", workloads)):
                if isinstance(values, list):
                    batch[key] = torch.tensor(values)
                elif values is not None:
                    keywords[key] = values
            micro_batches, plan = prepare_micro_batches(batch, dp_group=group, **keywords)
        elif spec["entry"] == "dynamic":
            parts, plan = prepare_dynamic_batch(Proto(batch), spec["cap"], dp_group=group,
                                                costs=costs, workloads=workloads, **keywords)
            micro_batches = [part.batch for part in parts]
        else:
            micro_batches, plan = rearrange_micro_batches(batch, spec["cap"], dp_group=group,
                                                          costs=costs, workloads=workloads, **keywords)
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    return {"count": len(micro_batches), "plan": [list(part) for part in plan or []]}


if __name__ == "__main__":
    from _world import exit_now, play_rounds  # beside this script

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
