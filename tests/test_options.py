"""options.py: one PlanOptions, one validation, one way in from each source (issue 30, item 2).

Every expectation is written out here: the fields and their defaults, the metadata's
variables, flags and batch keys (checked against docs/options.md's table as well), the
spelling rule of the switches, which options the ranks agree on. No torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

import seqlen_balancing
from seqlen_balancing.cost import WorkloadModel
from seqlen_balancing.errors import (
    BelowOne,
    LossWeightKeysNotKeys,
    NotAnInteger,
    NotASwitch,
    NotPlanOptions,
    OverCapNotAString,
    SampleLimitBelowGroup,
    UnknownOption,
    UnknownOverCap,
    WorkloadModelInvalid,
)
from seqlen_balancing.options import (
    OPTIONS,
    GroupOptionKeywords,
    OptionKeywords,
    PlanOptionKeywords,
    PlanOptions,
    add_arguments,
    env_switch,
    env_values,
)


def keyword_names(keywords: type[Any]) -> frozenset[str]:
    """The keys of a TypedDict, required or not."""
    return frozenset(keywords.__required_keys__ | keywords.__optional_keys__)

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: name: (default, variable or None, flag, batch key or None, agreed), by hand.
DECLARED: dict[str, tuple[Any, str | None, str, str | None, bool]] = {
    "force_group_size": (1, None, "--force-group-size", "force_group_size", True),
    "num_batches_divided_by": (None, None, "--num-batches-divided-by", None, True),
    "min_num_micro_batch": (None, None, "--min-num-micro-batch", None, True),
    "same_micro_num_in_dp": (True, None, "--same-micro-num-in-dp", None, False),
    "use_dynamic_bsz_balance": (True, None, "--dynamic-bsz-balance", None, True),
    "heaviest_first": (False, "SEQLEN_BALANCING_HEAVIEST_FIRST", "--heaviest-first", "heaviest_first", True),
    "pad_to_multiple_of": (1, "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "--pad-to-multiple-of",
                           "pad_to_multiple_of", True),
    "micro_batch_multiple_of": (1, "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF",
                                "--micro-batch-multiple-of", "micro_batch_multiple_of", True),
    "padded": (False, None, "--padded", "padded", True),
    "max_samples_per_micro_batch": (None, "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH",
                                    "--max-samples-per-micro-batch", "max_samples_per_micro_batch", True),
    "over_cap": ("raise", "SEQLEN_BALANCING_OVER_CAP", "--over-cap", "over_cap", True),
    "dummy_micro_batches": (False, "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES", "--dummy-micro-batches",
                            "dummy_micro_batches", True),
    "loss_weight_keys": (None, "SEQLEN_BALANCING_LOSS_WEIGHT_KEYS", "--loss-weight-keys",
                         "loss_weight_keys", True),
    "workload_model": (None, "SEQLEN_BALANCING_WORKLOAD_MODEL", "--workload-model", None, True),
    "equal_rows_per_micro_batch": (False, "SEQLEN_BALANCING_EQUAL_ROWS_PER_MICRO_BATCH",
                                   "--equal-rows-per-micro-batch", "equal_rows_per_micro_batch", True),
    "micro_batch_fixed_tokens": (819.2, "SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS",
                                 "--micro-batch-fixed-tokens", "micro_batch_fixed_tokens", True),
}

#: verl 0.9.1's own parameters among the options (rearrange_micro_batches' order).
VERL_PARAMETERS = ["num_batches_divided_by", "same_micro_num_in_dp", "min_num_micro_batch",
                   "use_dynamic_bsz_balance", "force_group_size"]


def test_every_field_is_declared_once_with_its_metadata() -> None:
    fields = dataclasses.fields(PlanOptions)
    assert [f.name for f in fields] == list(DECLARED)
    for f in fields:
        default, env, flag, key, agreed = DECLARED[f.name]
        option = OPTIONS[f.name]
        assert f.default == default, f.name
        assert (option.env, option.flag, option.batch_key, option.agreed) == (env, flag, key, agreed)
        assert option.doc and option.verl
        assert option.verl_parameter == (f.name in VERL_PARAMETERS)
    assert PlanOptions() == PlanOptions(**{name: d[0] for name, d in DECLARED.items()})
    doc = PlanOptions.__doc__ or ""
    assert all(f"``{name}``" in doc and OPTIONS[name].doc in doc for name in DECLARED)


def test_the_typed_keywords_are_the_fields() -> None:
    every = set(DECLARED)
    assert keyword_names(PlanOptionKeywords) == every
    assert keyword_names(GroupOptionKeywords) == every - set(VERL_PARAMETERS) | {"force_group_size"}
    assert keyword_names(OptionKeywords) == every - set(VERL_PARAMETERS)


@pytest.mark.torch
def test_the_verl_functions_keep_verls_parameters_and_add_options_and_keywords() -> None:
    import seqlen_balancing.batch as batch

    for name, verl_names in {
        "rearrange_micro_batches": ["batch", "max_token_len", "dp_group", *VERL_PARAMETERS],
        "prepare_micro_batches": ["data", "dp_group", *VERL_PARAMETERS[:4]],
        "prepare_dynamic_batch": ["data", "max_token_len", "dp_group", *VERL_PARAMETERS[:4]],
    }.items():
        params = list(inspect.signature(getattr(batch, name)).parameters.values())
        assert [p.name for p in params[: len(verl_names)]] == verl_names, name
        extra = params[len(verl_names):]
        kind = inspect.Parameter
        # prefix_lengths (issue 47) on the three entry points that take per-sample data by key
        assert [(p.name, p.kind) for p in extra] == [
            ("options", kind.KEYWORD_ONLY), ("costs", kind.KEYWORD_ONLY),
            ("workloads", kind.KEYWORD_ONLY), ("group_ids", kind.KEYWORD_ONLY),
            ("dummy_template", kind.KEYWORD_ONLY), ("prefix_lengths", kind.KEYWORD_ONLY),
            ("option_keywords", kind.VAR_KEYWORD)], name
    for function in (seqlen_balancing.plan_micro_batches, seqlen_balancing.plan_data_parallel):
        kinds = {p.name: p.kind for p in inspect.signature(function).parameters.values()}
        assert kinds["options"] is inspect.Parameter.KEYWORD_ONLY
        assert kinds["option_keywords"] is inspect.Parameter.VAR_KEYWORD
        assert set(kinds) & set(DECLARED) == set()  # no option restated


# ----------------------------------------------------------------------------- one validation


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"force_group_size": 0}, BelowOne("force_group_size", 0)),
        ({"force_group_size": None}, NotAnInteger("force_group_size", detail="None (NoneType)")),
        ({"num_batches_divided_by": "2"}, NotAnInteger("num_batches_divided_by", detail="'2' (str)")),
        ({"min_num_micro_batch": -1}, BelowOne("min_num_micro_batch", -1)),
        ({"padded": "yes"}, NotASwitch("padded", detail="'yes' (str)")),
        ({"same_micro_num_in_dp": 2}, NotASwitch("same_micro_num_in_dp", detail="2 (int)")),
        ({"over_cap": 1}, OverCapNotAString(detail="1 (int)")),
        ({"over_cap": "alnoe"}, UnknownOverCap(detail="'alnoe'")),
        ({"loss_weight_keys": []}, LossWeightKeysNotKeys(detail="got [] (list)")),
        ({"loss_weight_keys": ["a", 3]}, LossWeightKeysNotKeys(detail="got ['a', 3] (list)")),
        ({"max_samples_per_micro_batch": 1, "force_group_size": 2}, SampleLimitBelowGroup(1, 2)),
        ({"pad_to_multple_of": 8}, UnknownOption("pad_to_multple_of", "pad_to_multiple_of")),
        ({"costs": [1]}, UnknownOption("costs", "")),
    ],
)
def test_parse_returns_the_record_to_agree_on_and_never_raises(values: dict[str, Any], error: Any) -> None:
    base = PlanOptions(over_cap="alone")
    options, found = PlanOptions.parse(values, base)
    assert found == error
    assert options is base  # the options so far: the call still takes part in the agreement
    if all(name in DECLARED for name in values):  # PlanOptions(...) raises the same, whole
        with pytest.raises(error.exception_type) as caught:
            PlanOptions(**values)
        assert str(caught.value) == error.message()


def test_a_bad_workload_model_is_its_own_record() -> None:
    _, error = PlanOptions.parse({"workload_model": "hidden_size=0"})
    assert type(error) is WorkloadModelInvalid and "hidden_size must be a positive" in error.detail
    _, error = PlanOptions.parse({"workload_model": 8192})
    assert type(error) is WorkloadModelInvalid and "8192 (int)" in error.detail


def test_values_are_normalised_as_a_peer_reads_them() -> None:
    numpy = pytest.importorskip("numpy")
    options = PlanOptions(force_group_size=numpy.int64(2), padded=1, pad_to_multiple_of=None,
                          micro_batch_multiple_of=None, loss_weight_keys="loss_mask",
                          workload_model={"hidden_size": 4096})
    assert type(options.force_group_size) is int and options.force_group_size == 2
    assert options.padded is True and (options.pad_to_multiple_of, options.micro_batch_multiple_of) == (1, 1)
    assert options.loss_weight_keys == ("loss_mask",)
    assert options.workload_model == WorkloadModel(hidden_size=4096)
    assert PlanOptions(loss_weight_keys=["a", "b"]).loss_weight_keys == ("a", "b")
    assert PlanOptions(workload_model="hidden_size=8192").workload_model == WorkloadModel(8192)
    assert hash(options) == hash(dataclasses.replace(options))  # frozen, hashable
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.padded = False  # type: ignore[misc]


def test_changed_and_describe_name_what_differs_from_verls_behaviour() -> None:
    assert PlanOptions().changed() == {}
    options = PlanOptions(max_samples_per_micro_batch=2, loss_weight_keys=("a", "b"),
                          workload_model="hidden_size=8192,num_layers=80")
    assert list(options.changed()) == ["max_samples_per_micro_batch", "loss_weight_keys", "workload_model"]
    assert options.describe() == (
        "max_samples_per_micro_batch=2, loss_weight_keys=a,b, "
        "workload_model='hidden_size=8192,num_layers=80'")


# ----------------------------------------------------------------------------- keywords


def test_keywords_options_and_verls_parameters_in_their_order() -> None:
    base = PlanOptions(force_group_size=2, over_cap="alone")
    verl = {"force_group_size": 1, "min_num_micro_batch": None, "num_batches_divided_by": 4}
    got, error = PlanOptions.from_keywords(base, verl, {"padded": True})
    # a verl parameter at its default keeps the options' value; one given wins; keywords too
    assert error is None and got == PlanOptions(force_group_size=2, over_cap="alone",
                                                num_batches_divided_by=4, padded=True)
    got, error = PlanOptions.from_keywords(None, {"force_group_size": 3}, {"force_group_size": 4})
    assert error is None and got.force_group_size == 4
    start, error = PlanOptions.from_keywords({"padded": True})
    assert start == PlanOptions() and error == NotPlanOptions(detail="{'padded': True} (dict)")


def test_the_list_api_takes_options_or_keywords_alike() -> None:
    lengths = [1, 2, 1, 3, 1, 2, 1, 1]
    by_keyword = seqlen_balancing.plan_micro_batches(lengths, 8, max_samples_per_micro_batch=2)
    options = PlanOptions(max_samples_per_micro_batch=2)
    assert seqlen_balancing.plan_micro_batches(lengths, 8, options=options) == by_keyword
    # 8 rows, at most 2 each: 4 micro-batches; without the limit 2 (12 tokens under a cap of 8)
    assert max(len(mb) for mb in by_keyword) == 2 and len(by_keyword) == 4
    assert len(seqlen_balancing.plan_micro_batches(lengths, 8)) == 2
    # keywords are laid over options
    assert seqlen_balancing.plan_micro_batches(lengths, 8, options=options,
                                               max_samples_per_micro_batch=None) == \
        seqlen_balancing.plan_micro_batches(lengths, 8)
    with pytest.raises(TypeError, match=r"'max_sample_per_micro_batch' is not an option .*did you mean "
                                        r"'max_samples_per_micro_batch'"):
        seqlen_balancing.plan_micro_batches(lengths, 8, max_sample_per_micro_batch=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"options must be a seqlen_balancing\.PlanOptions"):
        seqlen_balancing.plan_data_parallel([lengths], 8, options={"padded": True})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the batch


def test_from_batch_reads_the_batch_keys_only() -> None:
    settings = {"force_group_size": 2, "max_samples_per_micro_batch": 4, "over_cap": "alone",
                "max_token_len_per_gpu": 100, "sp_size": 2}  # verl's own settings are not options
    got, error = PlanOptions.from_batch(settings, PlanOptions(padded=True))
    assert error is None
    assert got == PlanOptions(force_group_size=2, max_samples_per_micro_batch=4, over_cap="alone",
                              padded=True)
    assert PlanOptions.from_batch({"padded": 3})[1] == NotASwitch("padded", detail="3 (int)")


# ----------------------------------------------------------------------------- the environment


@pytest.mark.parametrize("text", ["1", "true", "TRUE", " yes ", "On"])
def test_the_one_spelling_rule_on(text: str) -> None:
    assert env_switch("SEQLEN_BALANCING_VERL", text) is True
    assert PlanOptions.from_env({"SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": text}).dummy_micro_batches


@pytest.mark.parametrize("text", ["0", "false", "No", "OFF", "", "  "])
def test_the_one_spelling_rule_off(text: str) -> None:
    assert env_switch("SEQLEN_BALANCING_VERL", text) is False
    assert not PlanOptions.from_env({"SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": text}).dummy_micro_batches


@pytest.mark.parametrize("text", ["2", "y", "enable", "truee", "1 0"])
def test_any_other_switch_value_is_refused_naming_the_variable_and_the_rule(text: str) -> None:
    names = ("SEQLEN_BALANCING_VERL", "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES", "SEQLEN_BALANCING_PURE_PYTHON")
    for name in names:
        with pytest.raises(ValueError, match="is not a switch value") as caught:
            env_values({name: text})
        assert str(caught.value) == (
            f"{name}={text!r} is not a switch value: it takes 1, true, yes or on, or 0, false, no, "
            "off or empty (any case)")


def test_every_variable_of_the_environment() -> None:
    env = {
        "SEQLEN_BALANCING_VERL": "on",
        "SEQLEN_BALANCING_BALANCE_STEP": "on",
        "SEQLEN_BALANCING_PURE_PYTHON": "on",
        "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "16",
        "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF": " 512 ",
        "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH": "2",
        "SEQLEN_BALANCING_OVER_CAP": "ALONE",
        "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": "yes",
        "SEQLEN_BALANCING_LOSS_WEIGHT_KEYS": "loss_mask, response_mask",
        "SEQLEN_BALANCING_WORKLOAD_MODEL": "hidden_size=8192,num_layers=80",
        "SEQLEN_BALANCING_EQUAL_ROWS_PER_MICRO_BATCH": "On",
        "SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS": " 400 ",
        "SEQLEN_BALANCING_HEAVIEST_FIRST": "TRUE",
        "PATH": "/bin",
    }
    assert PlanOptions.from_env(env) == PlanOptions(
        pad_to_multiple_of=16, micro_batch_multiple_of=512, max_samples_per_micro_batch=2,
        over_cap="alone", dummy_micro_batches=True, loss_weight_keys=("loss_mask", "response_mask"),
        workload_model=WorkloadModel(8192, 80), equal_rows_per_micro_batch=True,
        micro_batch_fixed_tokens=400.0, heaviest_first=True)
    for bad in ("-0.1", "nan", "inf", "a lot"):
        with pytest.raises(ValueError, match=r"SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS=.* is not accepted: "
                           r"it takes a finite number >= 0 \(tokens\), e\.g\. 819\.2"):
            PlanOptions.from_env({"SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS": bad})
    variables = {opt.env for opt in OPTIONS.values() if opt.env} | {
        "SEQLEN_BALANCING_VERL", "SEQLEN_BALANCING_BALANCE_STEP", "SEQLEN_BALANCING_PURE_PYTHON"}
    assert set(env) - {"PATH"} == variables  # the test names every variable there is
    assert PlanOptions.from_env({name: "" for name in variables}) == PlanOptions()


def test_unknown_names_and_bad_values_are_one_line_naming_each() -> None:
    env = {"SEQLEN_BALANCING_VRL": "1", "SEQLEN_BALANCING_OVER_CAP": "alnoe",
           "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "16.0", "SEQLEN_BALANCING_LOSS_WEIGHT_KEYS": "a,,b"}
    with pytest.raises(ValueError, match="is not accepted") as caught:
        PlanOptions.from_env(env)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(
        "SEQLEN_BALANCING_LOSS_WEIGHT_KEYS='a,,b' is not accepted: it takes TensorDict keys "
        "separated by commas, or empty for the defaults; "
        "SEQLEN_BALANCING_OVER_CAP='alnoe' is not accepted: it takes raise or alone (any case), "
        "or empty for raise; "
        "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF='16.0' is not accepted: it takes a positive integer, "
        "or empty for 1; "
        "SEQLEN_BALANCING_VRL is not a seqlen-balancing variable (did you mean SEQLEN_BALANCING_VERL?)")
    assert "they are SEQLEN_BALANCING_BALANCE_STEP, SEQLEN_BALANCING_DUMMY_MICRO_BATCHES, " in text


# ----------------------------------------------------------------------------- the command line


def test_one_flag_per_option_generated_from_the_metadata() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    given = parser.parse_args([])
    assert PlanOptions.from_args(given) == PlanOptions()
    args = parser.parse_args([
        "--force-group-size", "2", "--num-batches-divided-by", "3", "--min-num-micro-batch", "4",
        "--no-same-micro-num-in-dp", "--no-dynamic-bsz-balance", "--pad-to-multiple-of", "8",
        "--micro-batch-multiple-of", "16", "--padded", "--max-samples-per-micro-batch", "6",
        "--over-cap", "alone", "--dummy-micro-batches", "--loss-weight-keys", "a,b",
        "--workload-model", "hidden_size=64", "--micro-batch-fixed-tokens", "0",
    ])
    assert PlanOptions.from_args(args) == PlanOptions(
        force_group_size=2, num_batches_divided_by=3, min_num_micro_batch=4,
        same_micro_num_in_dp=False, use_dynamic_bsz_balance=False, pad_to_multiple_of=8,
        micro_batch_multiple_of=16, padded=True, max_samples_per_micro_batch=6, over_cap="alone",
        dummy_micro_batches=True, loss_weight_keys=("a", "b"), workload_model=WorkloadModel(64),
        micro_batch_fixed_tokens=0.0)
    for bad in (["--force-group-size", "0"], ["--over-cap", "alnoe"], ["--workload-model", "x=1"],
                ["--micro-batch-fixed-tokens", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_docs_options_md_has_one_row_per_option_as_declared() -> None:
    text = (DOCS / "options.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`"): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| `")}
    assert list(rows) == list(DECLARED)
    for name, (default, env, flag, key, agreed) in DECLARED.items():
        cells = rows[name]
        assert cells[0] == f"`{default!r}`", name
        assert cells[1] == (f"`{env}`" if env else "-"), name
        assert cells[2] == f"`{flag}`", name
        assert cells[3] == (f"`{key}`" if key else "-"), name
        assert cells[4] == ("agreed" if agreed else "decides whether ranks agree"), name


@pytest.mark.parametrize(("value", "kind", "text"), [
    (-0.1, ValueError, "micro_batch_fixed_tokens must be a finite number >= 0"),
    (float("nan"), ValueError, "micro_batch_fixed_tokens must be a finite number >= 0"),
    (float("inf"), ValueError, "micro_batch_fixed_tokens must be a finite number >= 0"),
    ("0.1", TypeError, "micro_batch_fixed_tokens must be a number >= 0"),
    (True, TypeError, "micro_batch_fixed_tokens must be a number >= 0"),
    (None, TypeError, "micro_batch_fixed_tokens must be a number >= 0"),
])
def test_micro_batch_fixed_tokens_is_a_finite_number_at_least_zero(value: Any, kind: type, text: str) -> None:
    with pytest.raises(kind, match=text):
        PlanOptions(micro_batch_fixed_tokens=value)
    assert PlanOptions(micro_batch_fixed_tokens=0).micro_batch_fixed_tokens == 0.0
    assert type(PlanOptions(micro_batch_fixed_tokens=1).micro_batch_fixed_tokens) is float


# ----------------------------------------------------------------------------- beyond a float (issue 46)

#: What the variable of micro_batch_fixed_tokens takes.
TAKES = "a finite number >= 0 (tokens), e.g. 819.2"

#: micro_batch_fixed_tokens's refusal, written out (the detail: the value shortened, its type).
OVERHEAD_REFUSED = ("micro_batch_fixed_tokens must be a finite number >= 0 (the fixed cost of one "
                    "micro-batch in tokens of linear work), got a negative, infinite or "
                    "NaN value, or one beyond a float; pass e.g. 819.2")


@pytest.mark.parametrize("value", [10**400, -(10**400), 2**1024, 10**309 + 1],
                         ids=["10**400", "-10**400", "2**1024", "10**309+1"])
def test_an_overhead_beyond_a_float_is_refused_like_any_bad_value(value: int) -> None:
    shown = repr(value)[:57] + "... (int)"  # describe(): 60 characters at most, then the type
    with pytest.raises(ValueError, match=r"^micro_batch_fixed_tokens must be a finite") as caught:
        PlanOptions(micro_batch_fixed_tokens=value)
    assert str(caught.value) == f"{OVERHEAD_REFUSED} ({shown})"
    base = PlanOptions(over_cap="alone")
    options, error = PlanOptions.parse({"micro_batch_fixed_tokens": value}, base)  # never raises
    assert options is base and error is not None
    assert error.message() == f"{OVERHEAD_REFUSED} ({shown})"
    _, error = PlanOptions.from_keywords(keywords={"micro_batch_fixed_tokens": value})
    assert error is not None and error.message().startswith(OVERHEAD_REFUSED)
    _, error = PlanOptions.from_batch({"micro_batch_fixed_tokens": value})
    assert error is not None and error.message().startswith(OVERHEAD_REFUSED)
    with pytest.raises(ValueError, match=r"^micro_batch_fixed_tokens must be a finite number") as caught:
        seqlen_balancing.plan_global_batch([5, 9, 3, 12], 2, 64, micro_batch_fixed_tokens=value)
    assert len(str(caught.value)) < 300
    # the largest float is still a number: refused only beyond it
    assert PlanOptions(micro_batch_fixed_tokens=2**1023).micro_batch_fixed_tokens == float(2**1023)


@pytest.mark.parametrize(("variable", "text", "takes"), [
    ("SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS", "1" + "0" * 400, TAKES),
    ("SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS", "1e400", TAKES),
    ("SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "9" * 5000, "a positive integer, or empty for 1"),
    ("SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH", "9" * 5000, "a positive integer, or empty for none"),
    ("SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "\u00b2", "a positive integer, or empty for 1"),  # isdigit()
], ids=["overhead-400-digits", "overhead-1e400", "pad-5000-digits", "limit-5000-digits", "pad-superscript"])
def test_a_variable_beyond_a_number_is_not_accepted_naming_it(variable: str, text: str, takes: str) -> None:
    shown = repr(text if len(text) <= 40 else text[:37] + "...")
    with pytest.raises(ValueError, match="is not accepted") as caught:
        PlanOptions.from_env({variable: text})
    assert str(caught.value) == f"{variable}={shown} is not accepted: it takes {takes}"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):  # the flag: argparse's usage error, never a traceback
        parser.parse_args([OPTIONS[next(n for n, o in OPTIONS.items() if o.env == variable)].flag, text])


# ----------------------------------------------------------------------------- a misspelt name (issue 46)


@pytest.mark.parametrize(("typo", "meant"), [
    ("SEQLEN_BALANCING_EQUAL_ROWS", "SEQLEN_BALANCING_EQUAL_ROWS_PER_MICRO_BATCH"),  # its start
    ("SEQLEN_BALANCING_ROWS_PER_MICRO_BATCH", "SEQLEN_BALANCING_EQUAL_ROWS_PER_MICRO_BATCH"),  # inside
    ("SEQLEN_BALANCING_BALANCE", "SEQLEN_BALANCING_BALANCE_STEP"),
    ("SEQLEN_BALANCING_OVER_CAPS", "SEQLEN_BALANCING_OVER_CAP"),  # holds the name
    ("SEQLEN_BALANCING_VRL", "SEQLEN_BALANCING_VERL"),  # no part matches: the closest spelling
    ("seqlen_balancing_equal_rows", None),  # not a variable of ours: the prefix is upper case
])
def test_a_misspelt_variable_suggests_the_variable_it_starts_or_holds(typo: str, meant: str | None) -> None:
    if meant is None:
        assert env_values({typo: "1"}) == {}
        return
    with pytest.raises(ValueError, match="is not a seqlen-balancing variable") as caught:
        env_values({typo: "1"})
    assert str(caught.value).startswith(
        f"{typo} is not a seqlen-balancing variable (did you mean {meant}?); they are ")


def test_a_misspelt_option_suggests_the_option_it_starts() -> None:
    _, error = PlanOptions.parse({"equal_rows": True})
    assert error == UnknownOption("equal_rows", "equal_rows_per_micro_batch")
    _, error = PlanOptions.parse({"max_samples": 2})
    assert error == UnknownOption("max_samples", "max_samples_per_micro_batch")
    _, error = PlanOptions.parse({"xyz": 2})
    assert error == UnknownOption("xyz", "")


def test_the_former_share_option_points_to_its_tokens() -> None:
    # issue 47: micro_batch_overhead (a share of 24576 x max_token_len) became tokens of
    # linear work; its old keyword and variable name the new one
    _, error = PlanOptions.parse({"micro_batch_overhead": 0.05})
    assert error is not None and "did you mean 'micro_batch_fixed_tokens'?" in error.message()
    with pytest.raises(ValueError, match=r"SEQLEN_BALANCING_MICRO_BATCH_OVERHEAD is not a seqlen-balancing "
                       r"variable \(did you mean SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS\?\)"):
        PlanOptions.from_env({"SEQLEN_BALANCING_MICRO_BATCH_OVERHEAD": "0.05"})
