"""The verl switch on verl 0.9.1 itself (issue 18): every binding, verl's call sites.

- A new process per mode (``_switch_scan.py``, a fork of ``tests/preloaded.py``'s server:
  torch and tensordict imported, verl and this library not yet): with ``SEQLEN_BALANCING_VERL=1`` the
  ``verl.plugins`` entry point switches every binding of the 13 names in the modules that
  import on CPU (read from verl's source, not listed by hand); without it none; after
  ``revert()`` none; ``VERL_USE_EXTERNAL_MODULES=seqlen_balancing.verl.enable`` (verl 0.6-0.8's
  way) does the same as the plugin.
- In this process: verl's own ``prepare_micro_batches``, ``prepare_dynamic_batch`` and
  ``RayPPOTrainer._balance_batch`` run the library's plan once switched, and verl's without.
- verl's FSDP engine and two Ray workers, each in its own interpreter:
  ``test_switch_jobs.py``.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from types import CodeType, FrameType, ModuleType

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

import seqlen_balancing.verl as switch
from compat._scripts import HERE, run_forked

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)


#: Lengths where verl 0.9.1's rule needs 3 micro-batches at cap 12 (Karmarkar-Karp into 2
#: parts breaks the cap) and the library 2 ({6, 6} and {2, 5, 5}).
LENGTHS, CAP, VERL_COUNT, OUR_COUNT = [2, 6, 6, 5, 5], 12, 3, 2

#: Per module of verl 0.9.1, the bindings of the 13 names it holds once its imports ran
#: (the two defining modules count their definitions): the closing note of issue 18.
BINDINGS_0_9_1 = {
    "verl.utils.seqlen_balancing": 12,
    "verl.trainer.ppo.ray_trainer": 3,
    "verl.trainer.ppo.v1.trainer_base": 3,
    "verl.trainer.sft_trainer_ray": 2,
    "verl.workers.engine.utils": 3,
    "verl.workers.engine.fsdp.transformer_impl": 2,
}
#: The engines whose packages CI lacks (megatron-core, nemo_automodel, veomni, torchtitan):
#: their bindings, read from source; the hook switches them where they import.
NOT_IMPORTABLE_0_9_1 = {
    "verl.workers.engine.megatron.transformer_impl": 2,
    "verl.workers.engine.automodel.transformer_impl": 1,
    "verl.workers.engine.veomni.transformer_impl": 1,
    "verl.workers.engine.torchtitan.transformer_impl": 1,
}


def test_the_package_registers_its_verl_plugin() -> None:
    points = importlib.metadata.entry_points(group="verl.plugins", name="seqlen_balancing")
    assert [p.value for p in points] == ["seqlen_balancing.verl.plugin"], (
        "the installed metadata lacks the verl.plugins entry point: reinstall (pip install -e .)"
    )


def expected(report: dict[str, object]) -> set[str]:
    holders = report["holders"]
    assert isinstance(holders, dict)
    return {f"{module}.{name}" for module, names in holders.items() for name in names}


def counts(table: object) -> dict[str, int]:
    assert isinstance(table, dict)
    return {module: len(names) for module, names in table.items()}


def states(table: object) -> set[str]:
    assert isinstance(table, dict)
    return {state for names in table.values() for state in names.values()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("mode", "env"),
    [
        ("plugin", {"SEQLEN_BALANCING_VERL": "1"}),
        ("external", {"VERL_USE_EXTERNAL_MODULES": "seqlen_balancing.verl.enable",
                      "VERL_USE_EXTERNAL_PLUGINS": "none"}),
        ("off", {}),
    ],
)
def test_every_binding_in_a_fresh_interpreter(mode: str, env: dict[str, str]) -> None:
    report = run_forked("_switch_scan.py", mode, timeout=240, **env)
    assert report["verl"] == "0.9.1"
    # the engines whose packages are absent here were skipped, the others all imported
    skipped = report["skipped"]
    assert isinstance(skipped, dict)
    assert set(skipped) == {
        f"verl.workers.engine.{engine}.transformer_impl"
        for engine in ("megatron", "automodel", "veomni", "torchtitan")
    }
    assert counts(report["holders"]) == BINDINGS_0_9_1
    assert counts(report["not_imported"]) == NOT_IMPORTABLE_0_9_1
    bindings = sum(BINDINGS_0_9_1.values()) - 13 + sum(NOT_IMPORTABLE_0_9_1.values())
    assert bindings == 17  # issue 18: 17 bindings in 9 modules, besides the 13 definitions
    if mode == "off":
        assert states(report["holders"]) == {"verl"}
        assert report["anywhere"] == []  # no verl module holds a library function
        return
    assert states(report["holders"]) == {"ours"}
    assert set(report["anywhere"]) == expected(report)  # (list) exactly those, nowhere else
    listed = report["replacements"]
    assert isinstance(listed, list)
    assert {f"{m}.{n}" for m, n in listed} == expected(report)
    assert states(report["after_revert"]) == {"verl"} and report["anywhere_after_revert"] == []
    stderr = str(report["stderr"])
    assert stderr.count("switched on for verl 0.9.1 in process") == 1
    print(f"\n{mode}: bindings per module {counts(report['holders'])}; import verl "
          f"{report['import_verl_s']:.2f} s")


def jagged_ids(lengths: list[int]) -> torch.Tensor:
    rows = [torch.arange(n, dtype=torch.long) + 100 * i for i, n in enumerate(lengths)]
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def engine_batch(lengths: list[int], cap: int) -> TensorDict:
    batch = TensorDict({"input_ids": jagged_ids(lengths)}, batch_size=[len(lengths)])
    batch["max_token_len_per_gpu"] = NonTensorData(cap)
    return batch


def dataproto(lengths: list[int]) -> object:
    from verl.protocol import DataProto

    width = max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids = torch.arange(len(lengths)).unsqueeze(1).expand(-1, width).contiguous()
    return DataProto.from_dict({"attention_mask": mask, "input_ids": ids}, {"uid": np.arange(len(lengths))})


def plan_counts(verl_engine_utils_module: ModuleType, verl: ModuleType) -> tuple[int, int]:
    """Micro-batch counts of verl's prepare_micro_batches and prepare_dynamic_batch, called
    through verl's own modules, as verl's engines and actors call them."""
    micro, _ = verl_engine_utils_module.prepare_micro_batches(engine_batch(LENGTHS, CAP))
    dynamic, _ = verl.prepare_dynamic_batch(dataproto(LENGTHS), max_token_len=CAP)
    return len(micro), len(dynamic)


def test_verls_call_sites_plan_with_the_library_once_switched(
    verl_engine_utils_module: ModuleType, verl: ModuleType
) -> None:
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine

    assert plan_counts(verl_engine_utils_module, verl) == (VERL_COUNT, VERL_COUNT)
    switch.apply()
    try:
        assert plan_counts(verl_engine_utils_module, verl) == (OUR_COUNT, OUR_COUNT)
        # the FSDP engine calls the name it bound at import: the library's too
        import seqlen_balancing

        assert fsdp_engine.prepare_micro_batches is seqlen_balancing.prepare_micro_batches
    finally:
        switch.revert()
    assert plan_counts(verl_engine_utils_module, verl) == (VERL_COUNT, VERL_COUNT)


BALANCE_LENGTHS = [259, 72, 145, 72, 387, 49, 317, 410, 129, 466, 273, 362]
#: What RayPPOTrainer._balance_batch calls (besides get_group_balanced_partitions).
BALANCE_CALLS = ("calculate_workload", "get_seqlen_balanced_partitions", "log_seqlen_unbalance")


def balanced_order() -> tuple[list[int], dict[str, float], set[CodeType]]:
    """The row order verl's RayPPOTrainer._balance_batch gives a batch for 2 DP ranks, its
    metrics, and the code objects of every Python function it entered."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = object.__new__(RayPPOTrainer)  # _balance_batch reads only these two
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda worker_group, role: 2  # type: ignore[method-assign]
    batch = dataproto(BALANCE_LENGTHS)
    metrics: dict[str, float] = {}
    entered: set[CodeType] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            entered.add(frame.f_code)

    sys.setprofile(profile)
    try:
        trainer._balance_batch(batch, metrics)
    finally:
        sys.setprofile(None)
    return batch.batch["input_ids"][:, 0].tolist(), metrics, entered  # type: ignore[attr-defined]


def test_balance_batch_runs_the_librarys_partition(verl: ModuleType) -> None:
    """The two partition functions may agree on the data (the library breaks Karmarkar-Karp's
    ties as verl does), so what is checked is whose code ran, and the resulting partition."""
    import seqlen_balancing

    verl_code = {name: getattr(verl, name).__code__ for name in BALANCE_CALLS}
    our_code = {name: getattr(seqlen_balancing, name).__code__ for name in BALANCE_CALLS}
    ours = seqlen_balancing.get_seqlen_balanced_partitions(
        seqlen_balancing.calculate_workload(torch.tensor(BALANCE_LENGTHS)), k_partitions=2, equal_size=True
    )
    _, _, entered_off = balanced_order()
    switch.apply()
    try:
        our_order, metrics, entered_on = balanced_order()
    finally:
        switch.revert()
    for name in BALANCE_CALLS:
        assert verl_code[name] in entered_off and our_code[name] not in entered_off, name
        assert our_code[name] in entered_on and verl_code[name] not in entered_on, name
    half = len(BALANCE_LENGTHS) // 2
    # each DP rank gets one half of the reordered batch: the library's partition, as sets
    assert [sorted(our_order[:half]), sorted(our_order[half:])] == ours
    assert metrics == seqlen_balancing.log_seqlen_unbalance(BALANCE_LENGTHS, ours, "global_seqlen")


#: The override the README and docs/verl.md give for the Ray actors (quoted: Ray wants
#: string env_vars).
RAY_OVERRIDE = '+ray_kwargs.ray_init.runtime_env.env_vars.SEQLEN_BALANCING_VERL="1"'


def test_the_readme_override_gives_ray_a_string_variable() -> None:
    """verl composes main_ppo's config with Hydra and passes ray_kwargs.ray_init to ray.init;
    the README's override must survive both (an unquoted 1 becomes an int, which Ray refuses)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from ray.runtime_env import RuntimeEnv

    for page in ("README.md", "docs/verl.md"):
        assert f"'{RAY_OVERRIDE}'" in (HERE.parents[1] / page).read_text(encoding="utf-8"), page
    import verl

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[RAY_OVERRIDE])
        unquoted = compose(config_name="ppo_trainer", overrides=[RAY_OVERRIDE.replace('"1"', "1")])
    runtime_env = OmegaConf.to_container(config.ray_kwargs.ray_init.runtime_env)
    assert isinstance(runtime_env, dict)
    assert runtime_env["env_vars"] == {"SEQLEN_BALANCING_VERL": "1"}
    RuntimeEnv(env_vars=runtime_env["env_vars"])  # what ray.init validates
    with pytest.raises(TypeError, match="Dict\\[str, str\\]"):
        RuntimeEnv(env_vars=OmegaConf.to_container(unquoted.ray_kwargs.ray_init.runtime_env.env_vars))


def test_sft_trainer_ray_starts_ray_bare_so_no_override_exists() -> None:
    """docs/verl.md: ``verl.trainer.sft_trainer_ray`` calls a bare ``ray.init()`` and its
    config has no ``ray_kwargs``, so the variable must come from the environment Ray starts
    in (read from verl 0.9.1's source and config, not imported)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("verl.trainer.sft_trainer_ray")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    (run_sft,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "run_sft"]
    inits = [
        node for node in ast.walk(run_sft)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "ray.init"
    ]
    assert len(inits) == 1 and not inits[0].args and not inits[0].keywords
    config = Path(spec.origin).parent / "config" / "sft_trainer_engine.yaml"
    assert "ray_kwargs" not in config.read_text(encoding="utf-8")
    assert "sft_trainer_ray" in (HERE.parents[1] / "docs" / "verl.md").read_text(encoding="utf-8")


def test_docs_verl_md_binding_table_is_verls() -> None:
    """docs/verl.md's table of bindings and definitions per module equals the counts
    test_every_binding_in_a_fresh_interpreter reads from verl 0.9.1."""
    import re

    text = (HERE.parents[1] / "docs" / "verl.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(verl\.[\w.]+)` \| (\d+) \| (\d+) \| (.+) \|$", text, re.MULTILINE)
    table = {module: int(bindings) + int(definitions) for module, bindings, definitions, _ in rows}
    importable = {module for module, _, _, imports in rows if imports == "yes"}
    assert {m: n for m, n in table.items() if m in importable} == BINDINGS_0_9_1
    assert {m: n for m, n in table.items() if m not in importable} == NOT_IMPORTABLE_0_9_1
    definitions = sum(int(d) for _, _, d, _ in rows)
    assert (definitions, sum(table.values()) - definitions, len(table) - 1) == (13, 17, 9)
