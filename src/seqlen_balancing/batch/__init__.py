"""TensorDict / DataProto glue: read effective lengths, cut micro-batches, restore order.

The plan itself comes from :mod:`seqlen_balancing.planning.planner` (pure Python); this package reads
the lengths from tensors (one device-to-host copy), takes part in the DP agreement, and
indexes the batch. One module per job:

* :mod:`~seqlen_balancing.batch.workload`: verl's workload on tensors (:func:`calculate_workload`);
* :mod:`~seqlen_balancing.batch.kinds`: what kind of entry a value is;
* :mod:`~seqlen_balancing.batch.nested`: jagged nested tensors (row lengths, building, offsets);
* :mod:`~seqlen_balancing.batch.lengths`: effective lengths (:func:`effective_lengths`);
* :mod:`~seqlen_balancing.batch.cut`: checking every entry before the agreement, and cutting
  the checked batch into micro-batches;
* :mod:`~seqlen_balancing.batch.filler`: the zero-weight copies (dummy micro-batches, filler rows);
* :mod:`~seqlen_balancing.batch.micro_batches`: :func:`rearrange_micro_batches`,
  :func:`prepare_micro_batches`, the verdict (whether to agree, the agreed count or error),
  and ``prepare_micro_batches``' settings read from the batch;
* :mod:`~seqlen_balancing.batch.trim`: padded micro-batches cut to their width, and back;
* :mod:`~seqlen_balancing.batch.restore`: :func:`restore_dynamic_batch`;
* :mod:`~seqlen_balancing.batch.dataproto`: :func:`prepare_dynamic_batch`;
* :mod:`~seqlen_balancing.batch.loss`: the loss normaliser of a whole step
  (:func:`step_loss_scales`), one ``all_reduce`` of the loss tokens over the DP group.

The rule (DESIGN section 3, "Fail before the collective" and "Errors are collective"):
every public call here runs in three steps, and only the first may find a problem.

1. **Check** (before the one ``all_reduce``): the arguments, the batch's type and batch
   dimension, its length source (mask or jagged ``input_ids``), every entry's kind, layout
   and device (:mod:`~seqlen_balancing.batch.cut`: dense, nested, sparse COO and 2-D
   CSR/CSC tensors, lazy stacks, non-tensor data; anything else is refused naming its key),
   the host offsets the cut will need, and a DataProto's parts (``non_tensor_batch`` a dict
   of arrays with one row per sample, ``meta_info`` deep-copied once). Whatever fails
   becomes an error record (:mod:`seqlen_balancing.errors`: named fields, an entry's key
   among them, that the agreement carries as integers), so that it travels through the
   agreement.
2. **Agree** (:mod:`~seqlen_balancing.batch.micro_batches`' ``_finish``): one ``all_reduce``
   of the error codes and counts; every rank of the group raises the same
   ``ValueError``/``TypeError``, or none does.
3. **Cut** (after the agreement, :mod:`~seqlen_balancing.batch.cut`): only what step 1 read
   and let through is used, and every entry kind step 1 lets through has its cutting there,
   so nothing raises for a batch that passed: a rank never fails alone while its peers
   return.

Local calls (no ``dp_group``) follow the same steps without the collective, so a bad batch
raises before any data is touched. :func:`restore_dynamic_batch` takes no part in an
agreement; it raises ``ValueError``/``TypeError`` naming the micro-batch or entry at fault.
"""

from __future__ import annotations

from seqlen_balancing.batch.dataproto import prepare_dynamic_batch
from seqlen_balancing.batch.lengths import effective_lengths
from seqlen_balancing.batch.loss import StepLossScales, step_loss_scales
from seqlen_balancing.batch.micro_batches import prepare_micro_batches, rearrange_micro_batches
from seqlen_balancing.batch.restore import restore_dynamic_batch
from seqlen_balancing.batch.trim import MicroBatchIndices
from seqlen_balancing.batch.workload import calculate_workload

__all__ = [
    "MicroBatchIndices",
    "StepLossScales",
    "calculate_workload",
    "effective_lengths",
    "prepare_dynamic_batch",
    "prepare_micro_batches",
    "rearrange_micro_batches",
    "restore_dynamic_batch",
    "step_loss_scales",
]
