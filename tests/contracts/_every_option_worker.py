"""Worker of ``test_every_option.py``: one gloo rank that plays the rounds it is given.

Run as a script, one process per rank (``tests/distributed/_world.py``)::

    python _every_option_worker.py ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

For each round this rank builds its TensorDict (dense rows in the columns the round names,
or jagged nested rows), calls ``rearrange_micro_batches`` with ``dp_group`` set, every
option of the round (as keywords or as one ``PlanOptions``) and the round's ``costs``,
``workloads`` and ``group_ids`` (a list, or the name of a tensor or ``NonTensorStack``
entry); a rank with no samples passes a one-row ``dummy_template`` where it has no columns
(jagged) and in some rounds where it has, and records what came back as plain data: the
exception, or the index lists, each micro-batch's ``uid`` rows, dense width and loss-weight
sums (and, with ``equal_rows_per_micro_batch``, its filler rows and their loss-weight
sums), and whether
``restore_dynamic_batch`` gave the input back. The test judges; nothing is judged here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

#: Seconds a gloo collective may wait before it raises (a hang becomes an error).
PG_TIMEOUT_S = 60
#: The entries a dummy may zero (the batch always holds them all; jagged: no response_mask).
WEIGHT_KEYS = ("loss_mask", "response_mask", "weight")


def build_batch(spec: dict[str, Any]) -> Any:
    """The rank's batch: ``uid`` (row number), a per-sample ``weight``, and either a dense
    ``attention_mask`` with ``input_ids``, ``loss_mask`` and ``response_mask`` (row ``i``
    real in columns ``spans[i]``) or jagged nested ``input_ids`` and ``loss_mask``."""
    import torch
    from tensordict import TensorDict

    lengths = spec["lengths"]
    n = len(lengths)
    common = {"uid": torch.arange(n), "weight": torch.arange(n, dtype=torch.float32) + 1}
    if spec["layout"] == "jagged":
        ids = [torch.arange(s, dtype=torch.long) + 1000 * i + 1 for i, s in enumerate(lengths)]
        loss = [torch.full((s,), float(i + 1)) for i, s in enumerate(lengths)]
        return TensorDict({
            "input_ids": torch.nested.nested_tensor(ids, layout=torch.jagged),
            "loss_mask": torch.nested.nested_tensor(loss, layout=torch.jagged), **common,
        }, batch_size=[n])
    width = spec["width"]
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, (lo, hi) in enumerate(spec["spans"]):
        mask[row, lo:hi] = 1
    ids = torch.where(mask.bool(), torch.arange(n * width).view(n, width) + 100, torch.zeros(n, width,
                                                                                            dtype=torch.long))
    return TensorDict({"attention_mask": mask, "input_ids": ids, "loss_mask": mask.float(),
                       "response_mask": mask.clone(), **common}, batch_size=[n])


def _equal(a: Any, b: Any) -> bool:
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):  # per-sample ids
        # (a NonTensorStack's values: a list on tensordict 0.8-0.10, the stack on newer ones)
        return bool(_values(a) == _values(b))
    if a.is_nested or b.is_nested:
        rows_a, rows_b = a.unbind(), b.unbind()
        return len(rows_a) == len(rows_b) and all(
            x.dtype == y.dtype and x.shape == y.shape and bool((x == y).all())
            for x, y in zip(rows_a, rows_b, strict=True))
    return a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else list(value.tolist())


def same(a: Any, b: Any) -> bool:
    """Every entry of ``a`` and ``b`` equal: dtype, shape and values (nested row by row)."""
    return sorted(a.keys()) == sorted(b.keys()) and all(_equal(a[k], b[k]) for k in a.keys())


def _weight_sum(value: Any) -> float:
    return float((value.values() if value.is_nested else value).abs().sum())


def _filler_weight(value: Any, real: int) -> float:
    """The loss weights of an entry's rows after the first ``real`` (row by row: slicing the
    whole micro-batch fails on tensordict 0.8-0.10 where a lazy stack would be left empty)."""
    rows = value.unbind() if value.is_nested else value[real:]
    return float(sum(float(row.abs().sum()) for row in list(rows)[real if value.is_nested else 0:]))


def _options(given: dict[str, Any]) -> dict[str, Any]:
    from seqlen_balancing.cost import WorkloadModel

    options = dict(given)
    if options.get("loss_weight_keys") is not None:
        options["loss_weight_keys"] = tuple(options["loss_weight_keys"])
    if options.get("workload_model") is not None:
        options["workload_model"] = WorkloadModel.parse(options["workload_model"])
    return options


def play(spec: dict[str, Any], group: Any) -> dict[str, Any]:
    """One call of ``rearrange_micro_batches``; its outcome as plain data."""
    import torch
    from tensordict import NonTensorStack, TensorDict

    from seqlen_balancing import PlanOptions, rearrange_micro_batches, restore_dynamic_batch

    empty = not spec["lengths"]
    # an empty jagged rank has no nested rows to build: an empty batch and a template
    batch = TensorDict({}, batch_size=[0]) if empty and spec["layout"] == "jagged" else build_batch(spec)
    template = build_batch({**spec, "lengths": [1], "spans": [[0, 1]], "width": 1}) \
        if empty and (spec["layout"] == "jagged" or spec["via"] == "options") else None
    options = _options(spec["options"])
    per_sample: dict[str, Any] = {key: spec[key] for key in ("costs", "workloads")
                                  if spec.get(key) is not None}
    ids = spec.get("group_ids")
    if ids is not None:  # the ids as a list, as strings in a NonTensorStack entry, or a tensor entry
        how = len(ids) % 3 if not empty else 0
        if how == 1:
            batch["gid"] = torch.tensor(ids, dtype=torch.long)
        elif how == 2:
            batch["gid"] = NonTensorStack(*[f"g{g}" for g in ids])
        per_sample["group_ids"] = "gid" if how else ids
    if template is not None:
        per_sample["dummy_template"] = template
    try:
        if spec["via"] == "options":
            micro_batches, plan = rearrange_micro_batches(
                batch, spec["cap"], dp_group=group, options=PlanOptions(**options), **per_sample)
        else:  # verl's positional dp_group, every option a keyword
            micro_batches, plan = rearrange_micro_batches(batch, spec["cap"], group, **options,
                                                          **per_sample)
    except Exception as error:  # every outcome is recorded; the test judges it
        return {"raised": type(error).__name__, "message": str(error)}
    try:
        back = restore_dynamic_batch(micro_batches, plan)
        restored = int(back.batch_size[0]) == 0 if empty else same(back, batch)
    except Exception as error:
        restored = f"{type(error).__name__}: {error}"
    dense = spec["layout"] != "jagged"
    return {
        "plan": [[int(i) for i in part] for part in plan],
        "uids": [[int(u) for u in mb["uid"]] for mb in micro_batches],
        "widths": [int(mb["attention_mask"].shape[1]) if dense else None for mb in micro_batches],
        "weights": [{key: _weight_sum(mb[key]) for key in WEIGHT_KEYS if key in mb.keys()}
                    for mb in micro_batches],
        # equal_rows_per_micro_batch: each list's filler rows, and their loss weights alone
        "filler": [int(getattr(part, "filler", 0)) for part in plan],
        "filler_row": [int(getattr(part, "filler_row", -1)) for part in plan],
        "filler_weights": [
            {key: _filler_weight(mb[key], len(part)) for key in WEIGHT_KEYS if key in mb.keys()}
            for mb, part in zip(micro_batches, plan, strict=True)],
        "restored": restored,
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "distributed"))
    from _world import exit_now, play_rounds

    exit_now(play_rounds(sys.argv[1:], play, PG_TIMEOUT_S))
