"""seqlen_balancing.verl on a stand-in verl: apply, the import hook, revert, the check, the plugin.

The stand-in is a package named ``verl`` written to a temporary folder: the modules where
verl defines the 13 functions (stubs with verl's parameters, returning ``"verl"``), and
modules that bind them at import the ways verl's do (absolute, relative, aliased). Each
scenario runs in a new process (started with torch imported, tests/preloaded.py), so the
switch and the stand-in never reach this process. The real verl 0.9.1 is exercised in
tests/compat/test_switch.py.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import preloaded

# apply() loads the library's TensorDict functions; every scenario is a process of its own
pytestmark = [pytest.mark.torch, pytest.mark.slow]

SRC = Path(__file__).resolve().parents[1] / "src"

DEFINITIONS = {
    "verl.utils.seqlen_balancing": [
        "calculate_workload", "karmarkar_karp", "greedy_partition", "get_seqlen_balanced_partitions",
        "log_seqlen_unbalance", "ceildiv", "roundup_divisible", "rearrange_micro_batches",
        "get_reverse_idx", "prepare_dynamic_batch", "restore_dynamic_batch",
        "get_group_balanced_partitions",
    ],
    "verl.workers.engine.utils": ["prepare_micro_batches"],
}

#: The bindings the stand-in's modules make at import, besides the definitions.
BINDINGS = {
    "verl.workers.engine.utils": ["rearrange_micro_batches", "restore_dynamic_batch"],
    "verl.trainer.binder": ["calculate_workload", "ceildiv", "pmb"],
    "verl.workers.engine.fsdp": ["ceildiv", "prepare_micro_batches"],
    # imported by the engine utils' last line, before that module has finished (an import cycle)
    "verl.trainer.late": ["prepare_micro_batches"],
}

EXPECTED = sorted(
    {(module, name) for module, names in DEFINITIONS.items() for name in names}
    | {(module, name) for module, names in BINDINGS.items() for name in names}
)


def verl_parameters(name: str) -> str:
    """verl's parameter list of ``name``: the library's without its keyword-only extras."""
    import seqlen_balancing

    function = getattr(seqlen_balancing, name)
    kept = [p for p in inspect.signature(function).parameters.values()
            if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]
    return str(inspect.Signature([p.replace(annotation=p.empty) for p in kept]))


def write_verl(root: Path, overrides: dict[str, str] | None = None, engine: bool = True) -> None:
    """Write the stand-in verl under ``root``; ``overrides`` replaces parameter lists."""
    overrides = overrides or {}

    def stubs(names: list[str]) -> str:
        return "".join(
            f"def {name}{overrides.get(name, verl_parameters(name))}:\n    return 'verl'\n\n"
            for name in names
        )

    files = {
        "verl/__init__.py": "__version__ = '0.9.1'\n",
        "verl/utils/__init__.py": "",
        "verl/utils/seqlen_balancing.py": stubs(DEFINITIONS["verl.utils.seqlen_balancing"]),
        "verl/trainer/__init__.py": "",
        "verl/trainer/binder.py": (
            "from verl.utils.seqlen_balancing import calculate_workload, ceildiv\n"
            + ("from verl.workers.engine.utils import prepare_micro_batches as pmb\n" if engine else "")
        ),
    }
    if engine:
        files |= {
            "verl/workers/__init__.py": "",
            "verl/workers/engine/__init__.py": "",
            "verl/workers/engine/utils.py": (
                "from verl.utils.seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch\n"
                "\n"
                + stubs(DEFINITIONS["verl.workers.engine.utils"])
                + "import verl.trainer.late  # noqa: E402\n"
            ),
            "verl/trainer/late.py": "from verl.workers.engine.utils import prepare_micro_batches\n",
            "verl/workers/engine/fsdp.py": (
                "from verl.utils.seqlen_balancing import ceildiv\n"
                "from .utils import prepare_micro_batches\n"
            ),
        }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


PRELUDE = textwrap.dedent(
    """
    import importlib, json, logging, sys
    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(message)s")
    import seqlen_balancing
    import seqlen_balancing.verl as switch
    from seqlen_balancing.verl.hook import PostImportFinder
    MODULES = ["verl.utils.seqlen_balancing", "verl.workers.engine.utils", "verl.trainer.binder",
               "verl.workers.engine.fsdp", "verl.trainer.late"]
    NAMES = {"pmb": "prepare_micro_batches"}

    def load():
        for name in MODULES:
            importlib.import_module(name)

    def holders():
        # every (module, name) of the stand-in holding the library's function, and verl's
        ours, verls = [], []
        for module_name in MODULES:
            for name, value in vars(sys.modules[module_name]).items():
                if not callable(value) or name.startswith("_"):
                    continue
                if value is getattr(seqlen_balancing, NAMES.get(name, name), None):
                    ours.append([module_name, name])
                elif getattr(value, "__module__", "").startswith("verl."):
                    verls.append([module_name, name])
        return sorted(ours), sorted(verls)

    def hooked():
        return any(isinstance(finder, PostImportFinder) for finder in sys.meta_path)
    """
)


def run_process(root: Path, body: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run PRELUDE + body with the stand-in first on the path (no SEQLEN_BALANCING_* of this
    process's environment reaches it)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SEQLEN_BALANCING_")}
    environment |= {"PYTHONPATH": os.pathsep.join([str(root), str(SRC)]), **(env or {})}
    return preloaded.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=environment,
                         timeout=100)


def run(root: Path, body: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run PRELUDE + body with the stand-in first on the path; body prints one JSON line."""
    proc = run_process(root, body, env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def pairs(value: object) -> list[tuple[str, str]]:
    assert isinstance(value, list)
    return sorted((str(a), str(b)) for a, b in value)


def test_modules_imported_after_apply_bind_the_library_from_their_first_line(tmp_path: Path) -> None:
    write_verl(tmp_path)
    result = run(tmp_path, """
        applied = switch.apply()
        load()
        on, off = holders()
        kinds = {f"{r.module}.{r.name}": r.on_import for r in switch.switch._STATE.records.values()}
        restored = switch.revert()
        after_on, after_off = holders()
        reapplied = switch.apply()
        again_on, _ = holders()
        print(json.dumps(dict(applied=applied, on=on, off=off, kinds=kinds, restored=restored,
            after_on=after_on, after_off=after_off, reapplied=reapplied, again_on=again_on)))
    """)
    assert result["applied"] == []  # nothing of verl was imported yet
    assert pairs(result["on"]) == EXPECTED and result["off"] == []
    # the binder and the engine bound the library's functions themselves, on import
    kinds = result["kinds"]
    assert isinstance(kinds, dict)
    assert kinds["verl.trainer.binder.ceildiv"] is True
    assert kinds["verl.utils.seqlen_balancing.ceildiv"] is False
    assert kinds["verl.workers.engine.utils.prepare_micro_batches"] is False
    assert pairs(result["restored"]) == EXPECTED
    assert result["after_on"] == [] and pairs(result["after_off"]) == EXPECTED
    assert pairs(result["reapplied"]) == EXPECTED and pairs(result["again_on"]) == EXPECTED


def test_apply_after_import_rebinds_everything_once_and_revert_is_exact(tmp_path: Path) -> None:
    write_verl(tmp_path)
    result = run(tmp_path, """
        load()
        before = [[m, n, getattr(sys.modules[m], n).__module__] for m, n in
                  [("verl.trainer.binder", "pmb"), ("verl.workers.engine.fsdp", "ceildiv")]]
        first = switch.apply()
        second = switch.apply()
        on, off = holders()
        hooked_on = hooked()
        calls = [sys.modules["verl.trainer.binder"].ceildiv(7, 2),
                 sys.modules["verl.workers.engine.fsdp"].ceildiv(7, 2)]
        restored = switch.revert()
        twice = switch.revert()
        after_on, after_off = holders()
        after = [sys.modules["verl.trainer.binder"].ceildiv(7, 2)]
        print(json.dumps(dict(first=first, second=second, on=on, off=off, hooked_on=hooked_on,
            calls=calls, restored=restored, twice=twice, after_on=after_on, after_off=after_off,
            after=after, hooked_off=hooked())))
    """)
    assert pairs(result["first"]) == EXPECTED
    assert result["second"] == result["first"]
    assert pairs(result["on"]) == EXPECTED and result["off"] == []
    assert result["calls"] == [4, 4]  # the library's ceildiv, not the stub's "verl"
    assert result["hooked_on"] is True and result["hooked_off"] is False
    assert pairs(result["restored"]) == EXPECTED and result["twice"] == []
    assert result["after_on"] == [] and pairs(result["after_off"]) == EXPECTED
    assert result["after"] == ["verl"]
    stderr = str(result["stderr"])
    assert stderr.count("switched on for verl 0.9.1") == 1  # logged once, not per call
    assert f"{len(EXPECTED)} bindings replaced now" in stderr
    assert "verl.workers.engine.fsdp.prepare_micro_batches" in stderr


@pytest.mark.parametrize("loaded", [False, True], ids=["from-source", "from-function"])
def test_a_signature_mismatch_replaces_nothing_and_names_both_signatures(
    tmp_path: Path, loaded: bool
) -> None:
    verl_sig = verl_parameters("rearrange_micro_batches").replace(
        "same_micro_num_in_dp=True", "same_micro_num_in_dp=False"
    )
    assert "same_micro_num_in_dp=False" in verl_sig
    write_verl(tmp_path, overrides={"rearrange_micro_batches": verl_sig})
    result = run(tmp_path, f"""
        import verl  # as inside verl's own __init__: the version is known, nothing else loaded
        if {loaded}:
            load()
        try:
            switch.apply()
        except RuntimeError as error:
            message = str(error)
        else:
            message = None
        load()
        on, off = holders()
        print(json.dumps(dict(message=message, listed=switch.replacements(), on=on, hooked=hooked())))
    """)
    message = str(result["message"])
    assert "verl.utils.seqlen_balancing.rearrange_micro_batches(" in message
    assert "same_micro_num_in_dp=False" in message and "same_micro_num_in_dp=True" in message
    assert "verl 0.9.1" in message and "nothing was replaced" in message
    assert result["listed"] == [] and result["on"] == [] and result["hooked"] is False


def test_extra_parameters_must_be_keyword_only_with_defaults(tmp_path: Path) -> None:
    # verl with one parameter fewer than the library: the library's extra one is positional
    verl_sig = verl_parameters("restore_dynamic_batch").replace(", batch_idx_list", "")
    write_verl(tmp_path, overrides={"restore_dynamic_batch": verl_sig})
    result = run(tmp_path, """
        try:
            switch.apply()
        except RuntimeError as error:
            print(json.dumps(dict(message=str(error))))
        else:
            print(json.dumps(dict(message=None)))
    """)
    assert "extra parameter 'batch_idx_list' is not keyword-only" in str(result["message"])


def test_a_verl_without_the_engine_utils_module_is_switched_where_it_can_be(tmp_path: Path) -> None:
    write_verl(tmp_path, engine=False)
    result = run(tmp_path, """
        switch.apply()
        importlib.import_module("verl.trainer.binder")
        print(json.dumps(dict(listed=switch.replacements())))
    """)
    assert pairs(result["listed"]) == sorted(
        [("verl.utils.seqlen_balancing", n) for n in DEFINITIONS["verl.utils.seqlen_balancing"]]
        + [("verl.trainer.binder", "calculate_workload"), ("verl.trainer.binder", "ceildiv")]
    )


@pytest.mark.parametrize(
    ("value", "switched"), [(None, False), ("", False), ("off", False), ("1", True), ("TRUE", True),
                            (" on ", True)]
)
def test_the_plugin_switches_under_the_one_spelling_rule(tmp_path: Path, value: str | None,
                                                         switched: bool) -> None:
    write_verl(tmp_path)
    env = {} if value is None else {"SEQLEN_BALANCING_VERL": value}
    result = run(tmp_path, """
        import seqlen_balancing.verl.plugin
        load()
        on, _ = holders()
        print(json.dumps(dict(on=on, level=logging.getLogger("seqlen_balancing.verl").level)))
    """, env=env)
    assert pairs(result["on"]) == (EXPECTED if switched else [])
    assert (result["level"] == 20) is switched  # INFO, so the line shows under verl's WARNING
    assert ("options in force" in str(result["stderr"])) is switched


PLUGIN = """
    import verl  # the stand-in's version, as the plugin runs inside verl's __init__
    import seqlen_balancing.verl.plugin
    print(json.dumps(dict(on=holders()[0] if "verl.utils.seqlen_balancing" in sys.modules else [])))
"""


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"SEQLEN_BALANCING_VERL": "2"},
         "SEQLEN_BALANCING_VERL='2' is not a switch value: it takes 1, true, yes or on, or 0, false,"
         " no, off or empty (any case)"),
        ({"SEQLEN_BALANCING_VERL": "1", "SEQLEN_BALANCING_OVER_CAP": "alnoe"},
         "seqlen_balancing.verl cannot switch verl 0.9.1: SEQLEN_BALANCING_OVER_CAP='alnoe' is not "
         "accepted: it takes raise or alone (any case), or empty for raise; nothing was replaced"),
        ({"SEQLEN_BALANCING_VERL": "yes", "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": "maybe"},
         "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES='maybe' is not a switch value"),
        # a typo of the switch itself, or of an option: refused even with the switch off
        ({"SEQLEN_BALANCING_VRL": "1"},
         "SEQLEN_BALANCING_VRL is not a seqlen-balancing variable (did you mean SEQLEN_BALANCING_VERL?)"),
        ({"SEQLEN_BALANCING_VERL": "on", "SEQLEN_BALANCING_MAX_SAMPLE_PER_MICRO_BATCH": "2"},
         "SEQLEN_BALANCING_MAX_SAMPLE_PER_MICRO_BATCH is not a seqlen-balancing variable (did you "
         "mean SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH?)"),
    ],
)
def test_a_bad_setting_stops_the_process_with_one_line(tmp_path: Path, env: dict[str, str],
                                                       line: str) -> None:
    # verl hides an Exception from a plugin at DEBUG: the plugin exits with the message instead
    write_verl(tmp_path)
    proc = run_process(tmp_path, PLUGIN, env)
    assert proc.returncode == 1 and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("seqlen-balancing: ") and line in last, proc.stderr
    assert last.endswith("; this process stops here, before verl runs any part of the job on "
                         "mismatched functions")
    assert "Traceback" not in proc.stderr


def test_option_variables_without_the_switch_are_named_in_a_warning(tmp_path: Path) -> None:
    write_verl(tmp_path)
    env = {"SEQLEN_BALANCING_VERL": "0", "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH": "2"}
    result = run(tmp_path, PLUGIN, env)
    assert result["on"] == []
    assert ("SEQLEN_BALANCING_VERL is not on, so SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH do "
            "nothing: verl runs on its own functions") in str(result["stderr"])


def test_a_failed_switch_is_logged_at_error_and_stops_the_process(tmp_path: Path) -> None:
    write_verl(tmp_path, overrides={"ceildiv": "(a, b, c)"})
    proc = run_process(tmp_path, PLUGIN, env={"SEQLEN_BALANCING_VERL": "1"})
    assert proc.returncode == 1
    assert "ceildiv(a, b, c)" in proc.stderr.strip().splitlines()[-1]
    logged = "ERROR seqlen_balancing.verl SEQLEN_BALANCING_VERL is on but this process could not be switched"
    assert logged in proc.stderr


def test_the_enable_module_switches_on_import(tmp_path: Path) -> None:
    write_verl(tmp_path)
    result = run(tmp_path, """
        import seqlen_balancing.verl.enable
        load()
        print(json.dumps(dict(on=holders()[0])))
    """)
    assert pairs(result["on"]) == EXPECTED


def test_the_alignment_of_the_environment_reaches_verls_calls(tmp_path: Path) -> None:
    # Issue 21: a verl user sets the alignment once for every process. 65 samples of 250
    # tokens fit 16,384 as one micro-batch; aligned to 32 (256 each) they need two.
    write_verl(tmp_path)
    body = """
        import torch
        from tensordict import TensorDict
        load()
        switch.apply()
        verl_function = sys.modules["verl.workers.engine.utils"].rearrange_micro_batches
        batch = TensorDict({"attention_mask": torch.ones(65, 250, dtype=torch.long)}, [65])
        mbs, _ = verl_function(batch, 16384)
        explicit, _ = verl_function(batch, 16384, pad_to_multiple_of=1)  # the caller's wins
        direct, _ = seqlen_balancing.rearrange_micro_batches(batch, 16384)
        ours = seqlen_balancing.rearrange_micro_batches
        wrapped = getattr(verl_function, "__wrapped__", None) is ours
        print(json.dumps(dict(verl=len(mbs), explicit=len(explicit), direct=len(direct),
                              wrapped=wrapped, same=verl_function is ours)))
    """
    aligned = run(tmp_path, body, {"SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "32"})
    assert (aligned["verl"], aligned["explicit"], aligned["direct"]) == (2, 1, 1)
    assert aligned["wrapped"] is True and aligned["same"] is False
    plain = run(tmp_path, body)  # unset: the library's own function, nothing wrapped
    assert (plain["verl"], plain["same"]) == (1, True)
    bad = run(tmp_path, """
        load()
        try:
            switch.apply()
        except ValueError as error:
            print(json.dumps(dict(error=str(error), on=holders()[0])))
    """, {"SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF": "two"})
    assert "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF" in str(bad["error"]) and bad["on"] == []
    assert "nothing was replaced" in str(bad["error"])


REFUSED = """
    load()
    try:
        switch.apply()
    except Exception as error:
        refused = dict(type=type(error).__name__, message=str(error))
    else:
        refused = None
    on, off = holders()
    print(json.dumps(dict(refused=refused, on=on, off=off, listed=switch.replacements(),
                          hooked=hooked())))
"""


def assert_refused_untouched(result: dict[str, object], kind: str, replaced_by_test: str = "") -> str:
    """The refusal's type is ``kind``, and the stand-in verl holds only its own functions
    (but for the name the test itself replaced with something not verl's)."""
    refused = result["refused"]
    assert isinstance(refused, dict) and refused["type"] == kind, refused
    assert result["on"] == []
    assert pairs(result["off"]) == [pair for pair in EXPECTED if pair[1] != replaced_by_test]
    assert result["listed"] == [] and result["hooked"] is False
    message = str(refused["message"])
    assert "nothing was replaced" in message and "verl 0.9.1" in message
    return message


def test_a_verl_function_without_a_readable_signature_is_a_runtime_error_naming_it(tmp_path: Path) -> None:
    # Issue 25 case 5: inspect's own ValueError ("no signature found for builtin") named no
    # verl function. A compiled (builtin) function in verl's place: the documented refusal.
    builtin = "next"
    write_verl(tmp_path)
    module = tmp_path / "verl/utils/seqlen_balancing.py"
    module.write_text(module.read_text() + f"ceildiv = {builtin}\n", encoding="utf-8")
    message = assert_refused_untouched(run(tmp_path, REFUSED), "RuntimeError", "ceildiv")
    assert "verl.utils.seqlen_balancing.ceildiv(signature unreadable)" in message
    assert "seqlen_balancing.ceildiv(a, b)" in message  # the library's signature
    assert f"no signature found for builtin <built-in function {builtin}>" in message


def test_an_unparsable_verl_source_is_a_runtime_error_naming_the_function(tmp_path: Path) -> None:
    # Not imported yet: the switch reads the source; a file it cannot parse is refused too.
    write_verl(tmp_path)
    module = tmp_path / "verl/workers/engine/utils.py"
    module.write_text(module.read_text() + "def broken(:\n", encoding="utf-8")
    result = run(tmp_path, """
        import verl
        try:
            switch.apply()
        except Exception as error:
            refused = dict(type=type(error).__name__, message=str(error))
        print(json.dumps(dict(refused=refused, listed=switch.replacements(), hooked=hooked(),
                              loaded=sorted(m for m in sys.modules if m.startswith("verl.")))))
    """)
    refused = result["refused"]
    assert isinstance(refused, dict) and refused["type"] == "RuntimeError"
    message = str(refused["message"])
    assert "verl.workers.engine.utils.prepare_micro_batches(source unreadable)" in message
    assert "utils.py cannot be read" in message and "nothing was replaced" in message
    assert result["listed"] == [] and result["hooked"] is False
    assert result["loaded"] == []  # checked from source: no verl module was imported


def test_a_verl_name_that_is_not_a_function_is_refused(tmp_path: Path) -> None:
    write_verl(tmp_path)
    module = tmp_path / "verl/utils/seqlen_balancing.py"
    module.write_text(module.read_text() + "ceildiv = 7\n", encoding="utf-8")
    message = assert_refused_untouched(run(tmp_path, REFUSED), "RuntimeError", "ceildiv")
    assert "verl.utils.seqlen_balancing.ceildiv(missing)" in message
    assert "does not define it as a function" in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF", "8.5"), ("SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF", "-4")],
)
def test_a_malformed_alignment_variable_is_a_value_error_and_replaces_nothing(
    tmp_path: Path, variable: str, value: str
) -> None:
    # The documented type: ValueError (a bad setting's value), naming the variable and value.
    write_verl(tmp_path)
    message = assert_refused_untouched(run(tmp_path, REFUSED, {variable: value}), "ValueError")
    assert f"{variable}={value!r} is not accepted: it takes a positive integer, or empty for 1" in message


def test_no_verl_installed_is_a_runtime_error_naming_the_environment(tmp_path: Path) -> None:
    result = run(tmp_path, """
        # no verl anywhere: the stand-in folder is empty and the finder is told so
        find_spec = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *rest: None if name == "verl" else find_spec(name, *rest)
        try:
            switch.apply()
        except RuntimeError as error:
            print(json.dumps(dict(message=str(error), listed=switch.replacements(), hooked=hooked())))
    """)
    message = str(result["message"])
    assert "verl is not installed in this environment (" in message and sys.executable in message
    assert "nothing was replaced" in message
    assert result["listed"] == [] and result["hooked"] is False


def test_issue_27_options_of_the_environment_reach_verls_calls(tmp_path: Path) -> None:
    # Issue 27: over_cap, dummies, their loss-weight keys and a workload model, set once
    # for every process; calculate_workload (verl's DP balancing) follows the model.
    write_verl(tmp_path)
    body = """
        import torch
        from tensordict import NonTensorData, TensorDict
        load()
        switch.apply()
        utils = sys.modules["verl.workers.engine.utils"]
        binder = sys.modules["verl.trainer.binder"]
        def batch(lengths):
            mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
            for row, n in enumerate(lengths):
                mask[row, :n] = 1
            return TensorDict({"attention_mask": mask, "w": mask.float()}, [len(lengths)])
        over, over_idx = utils.rearrange_micro_batches(batch([5000, 100, 200]), 4096)
        short, short_idx = utils.rearrange_micro_batches(batch([30, 10, 20]), 1000, None, 4)
        engine = batch([4096] + [1024] * 8)
        engine["max_token_len_per_gpu"] = NonTensorData(16384)
        _, engine_idx = binder.pmb(engine, min_num_micro_batch=2)
        work = binder.calculate_workload(torch.tensor([10, 1000]))
        floats = binder.calculate_workload(torch.Tensor([10.0]))
        print(json.dumps(dict(over=over_idx, short=short_idx, weight=float(short[-1]["w"].sum()),
                              engine=sorted(engine_idx), work=work.tolist(), dtype=str(work.dtype),
                              floats=floats.tolist(), float_dtype=str(floats.dtype))))
    """
    env = {
        "SEQLEN_BALANCING_OVER_CAP": "alone",
        "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": "1",
        "SEQLEN_BALANCING_LOSS_WEIGHT_KEYS": "w",
        # a model whose attention term outweighs the linear one: the 4096 runs alone
        "SEQLEN_BALANCING_WORKLOAD_MODEL": "hidden_size=64,num_layers=2",
    }
    result = run(tmp_path, body, env)
    assert result["over"] == [[0], [1, 2]]
    assert "sample 0 costs 5000 tokens, over max_token_len=4096" in str(result["stderr"])
    assert result["short"][-1] == [] and len(result["short"]) == 4 and result["weight"] == 0
    assert result["engine"] == [[0], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert result["work"] == [384 * 10 + 100, 384 * 1000 + 1000**2] and result["dtype"] == "torch.int64"
    assert result["floats"] == [3940.0] and result["float_dtype"] == "torch.float32"
    plain = run(tmp_path, """
        import torch
        from tensordict import TensorDict
        load()
        switch.apply()
        utils = sys.modules["verl.workers.engine.utils"]
        mask = torch.zeros(2, 5000, dtype=torch.long)
        mask[0], mask[1, :10] = 1, 1
        try:
            utils.rearrange_micro_batches(TensorDict({"attention_mask": mask}, [2]), 4096)
        except ValueError as error:
            print(json.dumps(dict(error=str(error))))
    """)  # unset: verl's behaviour, an over-cap sample raises
    assert "exceeds max_token_len=4096" in str(plain["error"])
    bad = run(tmp_path, """
        load()
        try:
            switch.apply()
        except ValueError as error:
            print(json.dumps(dict(error=str(error), on=holders()[0])))
    """, {"SEQLEN_BALANCING_OVER_CAP": "drop"})
    assert "SEQLEN_BALANCING_OVER_CAP='drop' is not accepted: it takes raise or alone" in str(bad["error"])
    assert bad["on"] == []


def _switch_records(stderr: str) -> list[list[str]]:
    """The INFO records of ``seqlen_balancing.verl``, each with its continuation lines."""
    records: list[list[str]] = []
    for line in stderr.splitlines():
        if line.startswith("INFO seqlen_balancing.verl "):
            records.append([line.removeprefix("INFO seqlen_balancing.verl ")])
        elif line.startswith("  verl.") and records:
            records[-1].append(line)
    return records


def test_the_log_lines_docs_verl_md_shows(tmp_path: Path) -> None:
    # docs/verl.md, "Check the logs": through the plugin (before any verl module binds the
    # functions) one line on switch-on and one per defining module as it is imported;
    # apply() after verl's modules were imported: one record of N + 1 lines for N bindings.
    write_verl(tmp_path)
    result = run(tmp_path, """
        import verl  # the plugin runs at the end of verl's __init__: the version is known
        import seqlen_balancing.verl.plugin
        load()
        switch.revert()
        print("-- late", file=sys.stderr)
        switch.apply()
        print(json.dumps(dict(pid=__import__("os").getpid())))
    """, env={"SEQLEN_BALANCING_VERL": "1"})
    pid = result["pid"]
    plugin, late = str(result["stderr"]).split("-- late\n")
    records = _switch_records(plugin)
    assert [len(record) for record in records] == [1, 1, 1, 1]
    first, utils, engine, off = (record[0] for record in records)
    assert first == (
        f"seqlen-balancing 0.1.0 switched on for verl 0.9.1 in process {pid} on {socket.gethostname()}, "
        "options in force: none (verl's behaviour); 0 bindings replaced now; verl modules imported "
        "later are switched on import"
    )
    names = ", ".join(DEFINITIONS["verl.utils.seqlen_balancing"])
    on_import = "seqlen-balancing switched {} on import in process {}: {}"
    assert utils == on_import.format("verl.utils.seqlen_balancing", pid, names)
    assert engine == on_import.format("verl.workers.engine.utils", pid, "prepare_micro_batches")
    assert off == f"seqlen-balancing switched off in process {pid}: {len(EXPECTED)} bindings restored"
    (record,) = _switch_records(late)
    assert len(record) == len(EXPECTED) + 1
    assert (f"in process {pid} on {socket.gethostname()}, options in force: none (verl's behaviour); "
            f"{len(EXPECTED)} bindings replaced now") in record[0]
    listed = [line.strip().removesuffix("; verl modules imported later are switched on import")
              for line in record[1:]]
    assert listed == [f"{module}.{name}" for module, name in EXPECTED]  # sorted, one per line
    assert record[-1].endswith("; verl modules imported later are switched on import")


@pytest.mark.torch
def test_the_sample_limit_of_the_environment_reaches_the_switched_functions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 26: 64 samples of 100 tokens fit 16,384 as one micro-batch; at most 16 per
    # micro-batch they are 4. The functions the switch binds (the test above checks the
    # binding itself) take the variable; a caller's own value wins.
    import torch
    from tensordict import TensorDict

    from seqlen_balancing.verl.switch import _library_functions

    batch = TensorDict({"attention_mask": torch.ones(64, 100, dtype=torch.long)}, [64])
    monkeypatch.setenv("SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH", "16")
    ours = _library_functions()
    assert len(ours["rearrange_micro_batches"](batch, 16384)[0]) == 4
    assert len(ours["rearrange_micro_batches"](batch, 16384, max_samples_per_micro_batch=64)[0]) == 1
    assert len(ours["prepare_dynamic_batch"].__wrapped__(  # unwrapped: no limit
        _Proto(batch), 16384)[0]) == 1
    assert len(ours["prepare_dynamic_batch"](_Proto(batch), 16384)[0]) == 4
    monkeypatch.delenv("SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH")
    assert len(_library_functions()["rearrange_micro_batches"](batch, 16384)[0]) == 1


class _Proto:
    """A DataProto stand-in for the test above."""

    def __init__(self, batch: object, non_tensor_batch: object = None, meta_info: object = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch or {}, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict, non_tensors: object, meta_info: object = None) -> _Proto:
        from tensordict import TensorDict

        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)
