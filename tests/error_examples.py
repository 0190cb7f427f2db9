"""Hand-written instances of every error record, with values someone could get wrong (huge,
zero, out of range, long keys), shared by tests/test_errors.py and the agreement's tests.

:func:`expected_type` is each record's exception type, stated here (``TYPE_ERRORS``),
not read from the record.
"""

from __future__ import annotations

from seqlen_balancing.errors import (
    BelowOne,
    BucketAboveCap,
    CallerDataRaised,
    CountAboveGroups,
    EmptyBatch,
    EntryLayout,
    EntryOnMeta,
    EntryStack,
    EntryUnreadable,
    GroupOverCap,
    LengthNotAnInteger,
    LengthsNotASequence,
    LengthsNotOneDimensional,
    LengthsUnreadable,
    LossWeightKeyMissing,
    LossWeightKeysNotKeys,
    LossWeightNotTensor,
    MaskNot2D,
    MaskRows,
    MetaInfoNotCopyable,
    MinAboveGroups,
    MissingSetting,
    ModeMismatch,
    NegativeLength,
    NoLengthSource,
    NoLossWeightEntry,
    NonTensorNotArray,
    NonTensorRows,
    NotADataProto,
    NotAnInteger,
    NotASwitch,
    NotATensorDict,
    NotDivisible,
    NotInGroup,
    NotOnePerSample,
    NotPlanOptions,
    OptionMismatch,
    OverCapNotAString,
    OverheadInvalid,
    OverheadNotANumber,
    PaddedGroupOverCap,
    PaddedLazyStack,
    PaddedSampleOverCap,
    PlanError,
    PrefixTreeAsked,
    ProtoRaggedStack,
    RowsOverCap,
    SampleLimitBelowGroup,
    SampleOverCap,
    StaticCountMismatch,
    StaticNotDivisible,
    StaticPathOption,
    TooManyDummies,
    UnknownOption,
    UnknownOverCap,
    WorkloadModelInvalid,
    WorkloadsAndModel,
)
from seqlen_balancing.errors.groups import (
    DummyTemplateInvalid,
    GroupIdsAndForceGroupSize,
    GroupIdsKeyMissing,
    GroupIdsNotASequence,
    GroupIdsOverCap,
    GroupIdsRaised,
    GroupIdUnhashable,
    GroupOverSampleLimit,
    NoDummyTemplate,
)
from seqlen_balancing.errors.prefix import (
    PrefixDiffersInGroup,
    PrefixLengthsKeyMissing,
    PrefixLengthsWith,
    PrefixLengthsWithoutGroups,
    PrefixOverLength,
)

#: (record, its text), for every record type, some more than once. The texts are written
#: out by hand: what a user reads for that error.
VALUES: list[tuple[PlanError, str]] = [
    (NotAnInteger("max_token_len"),
        "max_token_len must be a positive integer, got a value that is not an integer"),
    (NotAnInteger("max_samples_per_micro_batch", detail="1.5 (float)"),
        "max_samples_per_micro_batch must be a positive integer, got a value that is not an "
        "integer"),
    (BelowOne("sp_size", 0),
        "sp_size must be a positive integer (>= 1), got 0"),
    (BelowOne("force_group_size", -(2**70)),
        "force_group_size must be a positive integer (>= 1), got -1180591620717411303424"),
    (BelowOne("min_num_micro_batch", -(2**80)),
        "min_num_micro_batch must be a positive integer (>= 1), got -1208925819614629174706176"),
    (MissingSetting("max_token_len_per_gpu"),
        "the batch has no 'max_token_len_per_gpu' setting; store it in the TensorDict (verl's "
        "prepare_micro_batches reads its settings from the batch)"),
    (NotASwitch("padded"),
        "padded must be a bool (or 0/1), got a value that is not"),
    (NotASwitch("use_dynamic_bsz"),
        "use_dynamic_bsz must be a bool (or 0/1), got a value that is not"),
    (BucketAboveCap(4096, 1000, 8192),
        "micro_batch_multiple_of=4096 is larger than max_token_len=1000: every micro-batch is "
        "rounded up to at least one bucket, so none fits; raise max_token_len to at least 8192 "
        "or lower micro_batch_multiple_of"),
    (StaticPathOption("pad_to_multiple_of", 8),
        "pad_to_multiple_of=8 applies to the dynamic path (use_dynamic_bsz=True) only: the "
        "static path cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to "
        "change; drop pad_to_multiple_of or set use_dynamic_bsz"),
    (StaticPathOption("micro_batch_multiple_of", 0),
        "micro_batch_multiple_of=0 applies to the dynamic path (use_dynamic_bsz=True) only: the"
        " static path cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to "
        "change; drop micro_batch_multiple_of or set use_dynamic_bsz"),
    (StaticPathOption("costs", None),
        "costs applies to the dynamic path (use_dynamic_bsz=True) only: the static path cuts "
        "chunks of micro_batch_size_per_gpu samples and has no cap for it to change; drop costs"
        " or set use_dynamic_bsz"),
    (StaticPathOption("pad_to_multiple_of", 2**76 - 2),
        f"pad_to_multiple_of={2**76 - 2} applies to the dynamic path (use_dynamic_bsz=True) only: the static"
        " path cuts chunks of micro_batch_size_per_gpu samples and has no cap for it to change;"
        " drop pad_to_multiple_of or set use_dynamic_bsz"),
    (SampleLimitBelowGroup(3, 4),
        "max_samples_per_micro_batch=3 is below force_group_size=4: a forced group shares one "
        "micro-batch, so none could hold it; raise max_samples_per_micro_batch to at least 4 or"
        " lower force_group_size"),
    (OverCapNotAString(detail="3 (int)"),
        "over_cap must be 'raise' or 'alone', got a value that is not a string"),
    (UnknownOverCap(),
        "over_cap must be 'raise' or 'alone', got another string"),
    (UnknownOption("pad_to_multple_of", "pad_to_multiple_of"),
        "'pad_to_multple_of' is not an option of seqlen-balancing (did you mean "
        "'pad_to_multiple_of'?); the options are the fields of seqlen_balancing.PlanOptions "
        "(docs/options.md)"),
    (UnknownOption("x" * 40),
        f"'{'x' * 40}' is not an option of seqlen-balancing; the options are the fields of "
        "seqlen_balancing.PlanOptions (docs/options.md)"),
    (NotPlanOptions(),
        "options must be a seqlen_balancing.PlanOptions (or None), got a value that is not; "
        "build one with PlanOptions(...) or pass the options as keywords"),
    (WorkloadModelInvalid(detail="hidden_size must be a positive integer"),
        "workload_model must be a seqlen_balancing.cost.WorkloadModel, a mapping of its fields "
        "or 'key=value,...' text (e.g. 'hidden_size=8192,num_layers=80'), got one that is not a "
        "valid model shape"),
    (OverheadNotANumber(detail="'0.1' (str)"),
        "micro_batch_fixed_tokens must be a number >= 0 (the fixed cost of one micro-batch in "
        "tokens of linear work), got a value that is not a number"),
    (OverheadInvalid(detail="-0.1"),
        "micro_batch_fixed_tokens must be a finite number >= 0 (the fixed cost of one micro-batch in "
        "tokens of linear work), got a negative, infinite or NaN value, or one beyond "
        "a float; pass e.g. 819.2"),
    (WorkloadsAndModel(),
        "workloads and workload_model are both given: each sets the balance objective; pass one"
        " of them (per-sample workloads, or the model whose workloads to compute)"),
    (LengthNotAnInteger("costs", 7),
        "costs[7] is not an integer; costs are whole numbers of tokens"),
    (NegativeLength("seq_lens", 2, -3),
        "seq_lens[2] is -3; lengths must be >= 0 tokens"),
    (NegativeLength("workloads", 2**76 - 2, -(2**76)),
        f"workloads[{2**76 - 2}] is {-(2**76)}; workloads must be >= 0"),
    (NotOnePerSample("workloads", 3, 5),
        "workloads has 3 entries but the batch has 5 samples; give one workload per sample"),
    (LengthsNotASequence("costs"),
        "costs must be a sequence of whole numbers of tokens, one per sample (a list, a tuple, "
        "a 1-D tensor or array), got something that is not"),
    (LengthsNotASequence("costs", "dict"),
        "costs must be a sequence of whole numbers of tokens, one per sample (a list, a tuple, "
        "a 1-D tensor or array), got a value of type dict"),
    (CallerDataRaised("workloads", "KeyError", detail="KeyError(4)"),
        "reading workloads raised KeyError: the workloads given (or what their callable "
        "returned) must be read whole, one number per sample; fix the workloads or the callable"),
    (LengthsNotOneDimensional("seq_lens"),
        "seq_lens must be one-dimensional (one value per sample), got another shape"),
    (NoLengthSource(),
        "the batch has neither an 'attention_mask' nor jagged (nested) 'input_ids', so the "
        "effective sequence lengths cannot be read; add one of them"),
    (MaskNot2D(3),
        "attention_mask must be 2-D (batch, seq_len), got a 3-D tensor"),
    (MaskRows(4, 5),
        "attention_mask has 4 rows but the batch has 5 samples; they must match"),
    (LengthsUnreadable(),
        "the effective lengths could not be read from the batch; pass a TensorDict with batch "
        "size (n,) and a 2-D attention_mask or jagged input_ids"),
    (NotADataProto(),
        "data must be DataProto-like: .batch (a TensorDict), .non_tensor_batch (dict of "
        "arrays), .meta_info (dict) and a from_dict classmethod"),
    (NonTensorRows(0, 2**63),
        "a non_tensor_batch array has 0 rows but the batch has 9223372036854775808 samples; "
        "give every non-tensor entry one row per sample"),
    (NotATensorDict(),
        "batch must be a TensorDict with a batch dimension (batch_size (n,)), got an object "
        "that is not; pass the TensorDict of this rank's samples"),
    (NonTensorNotArray(),
        "every non_tensor_batch entry must be a NumPy array with one row per sample (as verl's "
        "DataProto holds), got one that is not; convert it with numpy.asarray"),
    (EntryOnMeta("input_ids"),
        "entry 'input_ids' is on the meta device, which holds no data, so its rows cannot be "
        "cut into micro-batches; move it to a real device or drop it"),
    (EntryUnreadable("a.b"),
        "entry 'a.b' could not be read to cut it into micro-batches (its row offsets); pass a "
        "readable nested tensor or drop the entry"),
    (EntryLayout("é" * 18),
        "entry 'éééééééééééééééééé' has a tensor layout whose rows cannot be picked for "
        "micro-batches (block-sparse BSR/BSC, CSR/CSC with batch or dense dimensions, mkldnn); "
        "store it dense, as sparse COO (.to_sparse_coo()) or as a 2-D CSR/CSC tensor"),
    (EntryStack("x" * 40),
        f"entry '{'x' * 40}' is a lazy stack along a dimension other "
        "than the batch dimension whose entries differ in shape (or are not dense tensors), so "
        "it cannot be cut by rows; stack its rows along dim 0, or make its entries dense or "
        "nested tensors"),
    (MetaInfoNotCopyable(),
        "meta_info cannot be deep-copied, and every micro-batch gets its own deep copy (as "
        "verl's prepare_dynamic_batch gives it); drop or replace the entry that cannot be "
        "copied"),
    (ProtoRaggedStack("position_ids"),
        "entry 'position_ids' of data.batch is a lazy stack whose rows differ in shape, and "
        "from_dict takes one tensor per key; store it as a nested tensor "
        "(torch.nested.as_nested_tensor(rows, layout=torch.jagged)) or pad it"),
    (PaddedLazyStack(),
        "padded=True cuts every micro-batch to its width, but the batch is a lazy stack along "
        "dim 0 (its rows may differ in width); stack it into one TensorDict (.contiguous()) or "
        "plan without padded"),
    (PrefixTreeAsked("use_prefix_tree"),
        "the batch sets 'use_prefix_tree', which asks for verl's prefix-tree micro-batches; "
        "seqlen_balancing does not build them: switch use_prefix_tree off, or unset "
        "SEQLEN_BALANCING_VERL so that verl plans this batch itself"),
    (LossWeightKeyMissing("loss_mask"),
        "loss-weight key 'loss_mask' named for the dummy micro-batches is not in the batch; "
        "name keys the batch holds (loss_weight_keys) or add the entry"),
    (NoLossWeightEntry(),
        "dummy_micro_batches=True needs a loss-weight entry to zero in the dummies, but the "
        "batch has neither 'loss_mask' nor 'response_mask'; add one, or name the keys with "
        "loss_weight_keys"),
    (LossWeightNotTensor("response_mask"),
        "loss-weight entry 'response_mask' is not a tensor, so the dummy micro-batches cannot "
        "zero it; name tensor entries in loss_weight_keys"),
    (LossWeightKeysNotKeys(),
        "loss_weight_keys must be a key (a string) or a list of keys, got a value that is not; "
        "e.g. loss_weight_keys=('loss_mask',)"),
    (EmptyBatch(),
        "the batch has no samples; pass at least one row"),
    (NotDivisible(7, 2),
        "batch size 7 is not divisible by force_group_size=2; every forced group needs all its "
        "samples"),
    (SampleOverCap(9, 1, 8, 1, 9, 9, 1, 1, False),
        "sample 1 has 9 tokens, which exceeds max_token_len=8 (1 sample over the cap in this "
        "batch); raise max_token_len to at least 9 (the longest sample of the call, on every DP"
        " rank of the group when they agree) or truncate the sequences"),
    (SampleOverCap(20, 4, 16, 3, 2**70, 24, 8, 8, True),
        "sample 4 has 20 tokens and costs 24 tokens (the cost given, rounded up to a multiple "
        "of pad_to_multiple_of=8), which exceeds max_token_len=16, usable as 16 tokens since "
        "each micro-batch is rounded up to a multiple of micro_batch_multiple_of=8 (3 samples "
        "over the cap in this batch); raise max_token_len to at least 1180591620717411303424 "
        "(the longest sample of the call, on every DP rank of the group when they agree, in "
        "aligned tokens), lower the costs or the alignment or truncate the sequences"),
    (GroupOverCap(30, 6, 16, 2, 40, 32, 1, 16, False),
        "forced group exceeds max_token_len: the group starting at sample 6 has 30 tokens and "
        "costs 32 tokens aligned to a multiple of pad_to_multiple_of=16, which exceeds "
        "max_token_len=16 (2 groups over the cap in this batch); raise max_token_len to at "
        "least 40 (the longest group of the call, on every DP rank of the group when they "
        "agree, in aligned tokens), lower the alignment or truncate the sequences"),
    (PaddedSampleOverCap(300, 1, 256, 1, 320, 320, 1, 64, False),
        "sample 1 has 300 tokens; padded=True holds it as 1 row x 320 wide = 320 token "
        "positions (a micro-batch costs rows x its widest row, each row rounded up to "
        "pad_to_multiple_of=64), which exceeds max_token_len=256 (1 sample over the cap in this"
        " batch); raise max_token_len to at least 320 (the costliest sample of the call, on "
        "every DP rank of the group when they agree), or truncate the sequences"),
    (PaddedGroupOverCap(90, 2, 100, 1, 360, 360, 16, 4, True),
        "forced group exceeds max_token_len: the group starting at sample 2 has a widest row of"
        " 90 tokens (the costs given); padded=True holds it as 3 rows x 92 wide = 360 token "
        "positions (a micro-batch costs rows x its widest row, each row rounded up to "
        "pad_to_multiple_of=4), which exceeds max_token_len=100, usable as 96 since each "
        "footprint is rounded up to a multiple of micro_batch_multiple_of=16 (1 group over the "
        "cap in this batch); raise max_token_len to at least 368 (the costliest group of the "
        "call, on every DP rank of the group when they agree), lower force_group_size or "
        "truncate the sequences"),
    (MinAboveGroups(9, 4),
        "min_num_micro_batch=9 asks for more micro-batches than the 4 samples/groups available "
        "(a micro-batch cannot be empty); lower min_num_micro_batch"),
    (CountAboveGroups(3, 2, 3, 2),
        "Cannot satisfy max_token_len while keeping forced groups atomic: 3 micro-batches are "
        "needed but only 2 samples/groups are available and a micro-batch cannot be empty (rank"
        " 2 needs 3); raise max_token_len, lower num_batches_divided_by or min_num_micro_batch,"
        " pass more samples, or pass dummy_micro_batches=True (a rank short of groups runs "
        "zero-weight micro-batches)"),
    (CountAboveGroups(4, 2, 3, None),
        "Cannot satisfy max_token_len while keeping forced groups atomic: 4 micro-batches are "
        "needed but only 2 samples/groups are available and a micro-batch cannot be empty (the "
        "cap needs 3, rounded up to 4 for num_batches_divided_by); raise max_token_len, lower "
        "num_batches_divided_by or min_num_micro_batch, pass more samples, or pass "
        "dummy_micro_batches=True (a rank short of groups runs zero-weight micro-batches)"),
    (CountAboveGroups(8, 3, 5, 0, 0),
        "Cannot satisfy max_token_len while keeping forced groups atomic: 8 micro-batches are "
        "needed but only 3 samples/groups are available and a micro-batch cannot be empty (rank"
        " 0 (global rank 0) needs 5, rounded up to 8 for num_batches_divided_by); raise "
        "max_token_len, lower num_batches_divided_by or min_num_micro_batch, pass more "
        "samples, or pass dummy_micro_batches=True (a rank short of groups runs zero-weight "
        "micro-batches)"),
    (TooManyDummies(70000, 4, 70004),
        "70004 micro-batches would need 70000 dummy micro-batches on a rank of 4 "
        "samples/groups, more than the 65536 allowed; lower min_num_micro_batch or "
        "num_batches_divided_by"),
    (RowsOverCap(4, 3, 20),
        "equal_rows_per_micro_batch: every micro-batch must hold 4 rows, but this rank's "
        "micro-batches hold at most 3 rows under max_token_len=20 once their filler rows "
        "(zero-weight rows of one token) are counted; raise max_token_len, give the ranks "
        "batches of similar sizes, or turn equal_rows_per_micro_batch off"),
    (StaticNotDivisible(10, 4, 2),
        "batch size 10 is not a positive multiple of micro_batch_size_per_gpu * "
        "force_group_size = 4 * 2; change micro_batch_size_per_gpu or the batch size"),
    (OptionMismatch("num_batches_divided_by", False, 1, "3", 0, "2"),
        "the ranks passed different num_batches_divided_by: rank 1 has num_batches_divided_by=3"
        " and rank 0 has num_batches_divided_by=2; every rank of the DP group must plan under the"
        " same options and cap, so set them alike on every rank (keywords, batch settings and "
        "SEQLEN_BALANCING_* variables)"),
    (OptionMismatch("max_samples_per_micro_batch", False, 0, "2", 3, "None", 10, 13),
        "the ranks passed different max_samples_per_micro_batch: rank 0 (global rank 10) has "
        "max_samples_per_micro_batch=2 and rank 3 (global rank 13) has "
        "max_samples_per_micro_batch=None; every rank of the DP group must plan under the same "
        "options and cap, so set them alike on every rank (keywords, batch settings and "
        "SEQLEN_BALANCING_* variables)"),
    (OptionMismatch("over_cap", False, 2, "'alone'", 0, "'raise'"),
        "the ranks passed different over_cap: rank 2 has over_cap='alone' and rank 0 has "
        "over_cap='raise'; every rank of the DP group must plan under the same options and cap,"
        " so set them alike on every rank (keywords, batch settings and SEQLEN_BALANCING_* "
        "variables)"),
    (OptionMismatch("padded", False, 1, "True", 0, "False"),
        "the ranks passed different padded: rank 1 has padded=True and rank 0 has padded=False;"
        " every rank of the DP group must plan under the same options and cap, so set them "
        "alike on every rank (keywords, batch settings and SEQLEN_BALANCING_* variables)"),
    (OptionMismatch("costs", True, 0, "True", 1, "False"),
        "the ranks passed different costs: rank 0 passes costs and rank 1 does not; every rank "
        "of the DP group must plan under the same options and cap, so set them alike on every "
        "rank (keywords, batch settings and SEQLEN_BALANCING_* variables)"),
    (OptionMismatch("loss_weight_keys", False, 2, "('loss_mask',)", 0, "None"),
        "the ranks passed different loss_weight_keys: rank 2 has loss_weight_keys=('loss_mask',) "
        "and rank 0 has loss_weight_keys=None; every rank of the DP group must plan under the "
        "same options and cap, so set them alike on every rank (keywords, batch settings and "
        "SEQLEN_BALANCING_* variables)"),
    (OptionMismatch("SEQLEN_BALANCING_BALANCE_STEP", False, 1, "True", 0, "False", 5, 4),
        "the ranks passed different SEQLEN_BALANCING_BALANCE_STEP: rank 1 (global rank 5) has "
        "SEQLEN_BALANCING_BALANCE_STEP=True and rank 0 (global rank 4) has "
        "SEQLEN_BALANCING_BALANCE_STEP=False; every rank of the DP group must plan under the "
        "same options and cap, so set them alike on every rank (keywords, batch settings and "
        "SEQLEN_BALANCING_* variables)"),
    (ModeMismatch(1, 0),
        "the ranks of the DP group disagree on use_dynamic_bsz: rank 1 cuts its batch "
        "statically (use_dynamic_bsz=False) but rank 0 dynamically; store the same "
        "use_dynamic_bsz in every rank's batch"),
    (ModeMismatch(1, 2, 7, 14),
        "the ranks of the DP group disagree on use_dynamic_bsz: rank 1 (global rank 7) cuts its"
        " batch statically (use_dynamic_bsz=False) but rank 2 (global rank 14) dynamically; "
        "store the same use_dynamic_bsz in every rank's batch"),
    (StaticCountMismatch(1, 5, 4, 2, 101, 104),
        "the ranks of the DP group would run different numbers of static micro-batches: rank 1 "
        "(global rank 101) has 5 and rank 4 (global rank 104) has 2; give every rank the same "
        "batch size (use_dynamic_bsz=False cuts batch size / (micro_batch_size_per_gpu * "
        "force_group_size) micro-batches)"),
    (NotInGroup(5, 2),
        "this process (global rank 5) is not a member of dp_group (a group of 2 ranks), so it "
        "cannot take part in that group's agreement; pass the DP group this process belongs to,"
        " or dp_group=None to plan locally"),
    # issue 32: group_ids and the dummies of an empty rank (texts written for them)
    (GroupIdsNotASequence("dict"),
        "group_ids must be one hashable id per sample (a list, a tuple, a 1-D tensor or array; "
        "with a batch, also the name of one of its entries), got a value of type dict"),
    (NotOnePerSample("group_ids", 3, 4),
        "group_ids has 3 entries but the batch has 4 samples; give one group id per sample"),
    (GroupIdUnhashable(2, "list"),
        "group_ids[2] is a list, which cannot be hashed; a group id is any hashable value (an "
        "int, a str, a tuple, ...)"),
    (GroupIdsRaised("KeyError", detail="KeyError(4)"),
        "reading group_ids raised KeyError: group_ids must be read whole, one hashable id per "
        "sample; fix the group_ids"),
    (GroupIdsKeyMissing("uid"),
        "group_ids='uid' names no entry of the batch; store one id per sample under that key (a "
        "tensor, a NonTensorStack, or a numpy array in a DataProto's non_tensor_batch) or pass "
        "the ids themselves"),
    (GroupIdsAndForceGroupSize(4),
        "group_ids and force_group_size=4 were both given; force_group_size=g is "
        "group_ids=[i // g for i in range(n)]: pass one of them"),
    (GroupIdsOverCap("'u7'", 5, 900, 800, 2**70, 1),
        "group 'u7' (group_ids[5], its first sample) costs 900 tokens (its samples' costs "
        "summed), which exceeds max_token_len=800; a group runs whole in one micro-batch: raise"
        " max_token_len to at least 1180591620717411303424 (the costliest group of the call, on "
        "every DP rank of the group when they agree), split the group, or pass over_cap='alone'"),
    (GroupIdsOverCap("3", 0, 300, 200, 300, 64, True),
        "group 3 (group_ids[0], its first sample) costs 300 token positions padded (its rows x "
        "its widest row), which exceeds max_token_len=200 (usable as 192: "
        "micro_batch_multiple_of=64); a group runs whole in one micro-batch: raise max_token_len"
        " to at least 320 (the costliest group of the call, on every DP rank of the group when "
        "they agree), split the group, or pass over_cap='alone'"),
    (GroupOverSampleLimit("'a'", 1, 3, 2),
        "group 'a' (group_ids[1], its first sample) has 3 samples, more than "
        "max_samples_per_micro_batch=2; a group runs whole in one micro-batch: raise "
        "max_samples_per_micro_batch to at least 3, split the group, or pass over_cap='alone'"),
    (NoDummyTemplate(),
        "the batch has no samples and no columns to build dummy micro-batches from "
        "(dummy_micro_batches=True); pass dummy_template= (a TensorDict or DataProto with at "
        "least one row of the batch's keys and dtypes), or a batch of zero rows that holds its "
        "entries"),
    (DummyTemplateInvalid(1),
        "dummy_template has no rows; it needs at least one row to copy; pass a TensorDict "
        "(DataProto) with at least one row of the batch's keys and dtypes, its loss weights "
        "among them"),
    # issue 47, item 3: shared prompts counted once (prefix_lengths)
    (PrefixLengthsWith("costs"),
        "prefix_lengths and costs were both given: prefix_lengths make each sample's cost (its "
        "tokens beyond the shared prefix, the prefix once per group part); pass one of them"),
    (PrefixLengthsWith("padded=True"),
        "prefix_lengths and padded=True were both given: a padded micro-batch costs its rows x "
        "its widest row, whatever its samples share; pass one of them"),
    (PrefixLengthsWithoutGroups(),
        "prefix_lengths was given without group_ids: a prefix is shared by the samples of one "
        "group (the responses of one prompt); pass group_ids (e.g. verl's uid) or a force_group_size above 1 "
        "too"),
    (PrefixOverLength(7, 2**70, 600),
        "prefix_lengths[7] is 1180591620717411303424 but sample 7 has 600 tokens; a sample's "
        "shared prefix is part of it: give at most its length"),
    (PrefixDiffersInGroup("'uid-3'", 4, 512, 9, 0),
        "group 'uid-3' has prefix_lengths 512 (sample 4) and 0 (sample 9); the samples of a "
        "group share one prefix: give them one prefix length"),
    (PrefixLengthsKeyMissing("prompt_len"),
        "prefix_lengths='prompt_len' names no entry of the batch; store one prefix length per "
        "sample under that key (a tensor, a NonTensorStack, or a numpy array in a DataProto's "
        "non_tensor_batch) or pass the lengths themselves"),
    (NotOnePerSample("prefix_lengths", 3, 5),
        "prefix_lengths has 3 entries but the batch has 5 samples; give one prefix length per "
        "sample"),
]

EXAMPLES = [error for error, _ in VALUES]

#: The records raised as TypeError (a wrong type); every other one is a ValueError.
TYPE_ERRORS = {
    "NotAnInteger", "NotASwitch", "OverCapNotAString", "OverheadNotANumber", "LengthNotAnInteger",
    "LengthsNotASequence",
    "NotADataProto", "NotATensorDict", "NonTensorNotArray", "EntryLayout", "EntryStack",
    "MetaInfoNotCopyable", "ProtoRaggedStack", "LossWeightNotTensor", "LossWeightKeysNotKeys",
    "UnknownOption", "NotPlanOptions", "GroupIdsNotASequence", "GroupIdUnhashable",
}


def expected_type(error: PlanError) -> type[Exception]:
    return TypeError if type(error).__name__ in TYPE_ERRORS else ValueError
