"""Error records about a batch: its type, its length source, its entries, its loss weights.

Records about one entry carry its key as text (a nested key as its dotted path), so that
every rank names the same entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqlen_balancing.errors.record import PlanError

__all__ = [
    "EntryLayout",
    "EntryOnMeta",
    "EntryStack",
    "EntryUnreadable",
    "LengthsUnreadable",
    "LossWeightKeyMissing",
    "LossWeightKeysNotKeys",
    "LossWeightNotTensor",
    "MaskNot2D",
    "MaskRows",
    "MetaInfoNotCopyable",
    "NoLengthSource",
    "NoLossWeightEntry",
    "NonTensorNotArray",
    "NonTensorRows",
    "NotADataProto",
    "NotATensorDict",
    "PaddedLazyStack",
    "PrefixTreeAsked",
    "ProtoRaggedStack",
]


@dataclass(frozen=True)
class NoLengthSource(PlanError):
    """Neither ``attention_mask`` nor jagged ``input_ids``: no effective lengths."""

    fixed_text = (
        "the batch has neither an 'attention_mask' nor jagged (nested) 'input_ids', so "
        "the effective sequence lengths cannot be read; add one of them"
    )


@dataclass(frozen=True)
class MaskNot2D(PlanError):
    """The ``attention_mask`` has ``ndim`` dimensions, not 2."""

    ndim: int

    fixed_text = "attention_mask must be 2-D (batch, seq_len), got a {ndim}-D tensor"


@dataclass(frozen=True)
class MaskRows(PlanError):
    """The ``attention_mask`` has ``rows`` rows for a batch of ``samples``."""

    rows: int
    samples: int

    fixed_text = (
        "attention_mask has {rows} rows but the batch has {samples} "
        "samples; they must match"
    )


@dataclass(frozen=True)
class LengthsUnreadable(PlanError):
    """Reading the lengths (or a setting) raised; the rank at fault chains the cause."""

    fixed_text = (
        "the effective lengths could not be read from the batch; pass a TensorDict with "
        "batch size (n,) and a 2-D attention_mask or jagged input_ids"
    )


@dataclass(frozen=True)
class NotADataProto(PlanError):
    """``prepare_dynamic_batch`` got an object without the parts of verl's DataProto."""

    exception_type = TypeError

    fixed_text = (
        "data must be DataProto-like: .batch (a TensorDict), .non_tensor_batch (dict of "
        "arrays), .meta_info (dict) and a from_dict classmethod"
    )


@dataclass(frozen=True)
class NonTensorRows(PlanError):
    """A ``non_tensor_batch`` array has ``rows`` rows for a batch of ``samples``."""

    rows: int
    samples: int

    fixed_text = (
        "a non_tensor_batch array has {rows} rows but the batch has "
        "{samples} samples; give every non-tensor entry one row per sample"
    )


@dataclass(frozen=True)
class NotATensorDict(PlanError):
    """The batch is not a TensorDict with a batch dimension."""

    exception_type = TypeError

    fixed_text = (
        "batch must be a TensorDict with a batch dimension (batch_size (n,)), got an object "
        "that is not; pass the TensorDict of this rank's samples"
    )


@dataclass(frozen=True)
class NonTensorNotArray(PlanError):
    """A ``non_tensor_batch`` entry is not a NumPy array."""

    exception_type = TypeError

    fixed_text = (
        "every non_tensor_batch entry must be a NumPy array with one row per sample (as "
        "verl's DataProto holds), got one that is not; convert it with numpy.asarray"
    )


@dataclass(frozen=True)
class EntryOnMeta(PlanError):
    """Entry ``key`` to cut is on the meta device, which holds no data."""

    key: str

    fixed_text = (
        "entry '{key}' is on the meta device, which holds no data, so its "
        "rows cannot be cut into micro-batches; move it to a real device or drop it"
    )


@dataclass(frozen=True)
class EntryUnreadable(PlanError):
    """Reading entry ``key`` to cut it raised (the rank at fault chains the cause)."""

    key: str

    fixed_text = (
        "entry '{key}' could not be read to cut it into micro-batches (its "
        "row offsets); pass a readable nested tensor or drop the entry"
    )


@dataclass(frozen=True)
class EntryLayout(PlanError):
    """Entry ``key`` has a tensor layout whose rows cannot be picked."""

    exception_type = TypeError
    key: str

    fixed_text = (
        "entry '{key}' has a tensor layout whose rows cannot be picked for "
        "micro-batches (block-sparse BSR/BSC, CSR/CSC with batch or dense dimensions, "
        "mkldnn); store it dense, as sparse COO (.to_sparse_coo()) or as a 2-D CSR/CSC tensor"
    )


@dataclass(frozen=True)
class EntryStack(PlanError):
    """Entry ``key`` is a lazy stack that cannot be cut along dim 0."""

    exception_type = TypeError
    key: str

    fixed_text = (
        "entry '{key}' is a lazy stack along a dimension other than the batch "
        "dimension whose entries differ in shape (or are not dense tensors), so it cannot be "
        "cut by rows; stack its rows along dim 0, or make its entries dense or nested tensors"
    )


@dataclass(frozen=True)
class MetaInfoNotCopyable(PlanError):
    """A DataProto's ``meta_info`` cannot be deep-copied."""

    exception_type = TypeError

    fixed_text = (
        "meta_info cannot be deep-copied, and every micro-batch gets its own deep copy (as "
        "verl's prepare_dynamic_batch gives it); drop or replace the entry that cannot be copied"
    )


@dataclass(frozen=True)
class ProtoRaggedStack(PlanError):
    """A DataProto's lazy-stacked batch has rows of other shapes at ``key``."""

    exception_type = TypeError
    key: str

    fixed_text = (
        "entry '{key}' of data.batch is a lazy stack whose rows differ in "
        "shape, and from_dict takes one tensor per key; store it as a nested tensor "
        "(torch.nested.as_nested_tensor(rows, layout=torch.jagged)) or pad it"
    )


@dataclass(frozen=True)
class PaddedLazyStack(PlanError):
    """``padded=True`` on a lazy stack cut by rows: no common width to cut to."""

    fixed_text = (
        "padded=True cuts every micro-batch to its width, but the batch is a lazy stack "
        "along dim 0 (its rows may differ in width); stack it into one TensorDict "
        "(.contiguous()) or plan without padded"
    )


@dataclass(frozen=True)
class LossWeightKeyMissing(PlanError):
    """A key named in ``loss_weight_keys`` is not in the batch."""

    key: str

    fixed_text = (
        "loss-weight key '{key}' named for the dummy micro-batches is not in "
        "the batch; name keys the batch holds (loss_weight_keys) or add the entry"
    )


@dataclass(frozen=True)
class NoLossWeightEntry(PlanError):
    """Dummies asked for, and the batch has no default loss-weight entry."""

    fixed_text = (
        "dummy_micro_batches=True needs a loss-weight entry to zero in the dummies, but the "
        "batch has neither 'loss_mask' nor 'response_mask'; add one, or name the keys with "
        "loss_weight_keys"
    )


@dataclass(frozen=True)
class LossWeightNotTensor(PlanError):
    """The loss-weight entry ``key`` is not a tensor, so the dummies cannot zero it."""

    exception_type = TypeError
    key: str

    fixed_text = (
        "loss-weight entry '{key}' is not a tensor, so the dummy "
        "micro-batches cannot zero it; name tensor entries in loss_weight_keys"
    )


@dataclass(frozen=True)
class LossWeightKeysNotKeys(PlanError):
    """``loss_weight_keys`` is neither a key nor a list of keys."""

    exception_type = TypeError

    fixed_text = (
        "loss_weight_keys must be a key (a string) or a list of keys, got a value that is "
        "not; e.g. loss_weight_keys=('loss_mask',)"
    )


@dataclass(frozen=True)
class PrefixTreeAsked(PlanError):
    """The batch sets ``key`` (verl's ``use_prefix_tree``): a mode of micro-batches the
    library does not build, refused rather than planned as ordinary ones."""

    key: str

    fixed_text = (
        "the batch sets '{key}', which asks for verl's prefix-tree micro-batches; "
        "seqlen_balancing does not build them: switch {key} off, or unset "
        "SEQLEN_BALANCING_VERL so that verl plans this batch itself"
    )
