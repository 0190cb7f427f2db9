"""DP agreement of ``rearrange_micro_batches`` across real torch.distributed processes.

Each suite of scenarios (``_workers.SUITES``) runs once per module in 2 or 4 gloo processes
(``_workers.py`` launched as a script, rendezvous through a file in a temporary directory);
every rank writes one JSON record per scenario, and each test here checks one scenario.
A rank that does not report within the deadline is killed and the test of the scenario
it was stuck in (and of every later one) fails, naming the hang.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from seqlen_balancing import plan_data_parallel
from seqlen_balancing.agreement import VECTOR_SIZE

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

_HERE = Path(__file__).resolve().parent
_WORKER_SCRIPT = _HERE / "_workers.py"

#: Seconds a whole suite may take (spawn, torch import, rendezvous, every scenario).
PAIR_DEADLINE_S = 90
QUAD_DEADLINE_S = 120


def _load_workers() -> Any:
    spec = importlib.util.spec_from_file_location("_seqlen_balancing_dist_workers", _WORKER_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


W = _load_workers()


# ---------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------


@dataclass
class SuiteRun:
    """What the ranks of one suite reported, and how the processes ended."""

    suite: str
    world_size: int
    directory: Path
    deadline_s: float
    seconds: float = 0.0
    hung: bool = False
    returncodes: list[int | None] = field(default_factory=list)
    records: list[dict[str, dict[str, Any]]] = field(default_factory=list)

    def output_tail(self, rank: int, chars: int = 3000) -> str:
        path = self.directory / f"rank{rank}.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-chars:]

    def diagnosis(self, rank: int) -> str:
        special = {
            key: value
            for key, value in self.records[rank].items()
            if key in ("__harness_error__", "__desync__")
        }
        state = (
            f"hung: killed after {self.deadline_s}s"
            if self.hung and self.returncodes[rank] in (None, -9)
            else f"exit code {self.returncodes[rank]}"
        )
        return (
            f"rank {rank} of suite {self.suite!r} ({state}; {self.seconds:.1f}s); "
            f"harness records: {special}; output tail:\n{self.output_tail(rank)}"
        )

    def scenario(self, name: str) -> list[dict[str, Any]]:
        """Every rank's record of scenario ``name``; fails the test if one is missing."""
        out = []
        for rank in range(self.world_size):
            record = self.records[rank].get(name)
            if record is None:
                pytest.fail(f"scenario {name!r}: no result from {self.diagnosis(rank)}", pytrace=False)
            out.append(record)
        return out


def _read_records(path: Path) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        records[record["scenario"]] = record
    return records


def run_ranks(
    suite: str,
    world_size: int,
    directory: Path,
    deadline_s: float,
    command: list[str] | None = None,
) -> SuiteRun:
    """Start ``world_size`` processes, wait for all of them until the deadline, kill the rest.

    ``command`` replaces the worker command line (used to test the launcher itself).
    """
    directory.mkdir(parents=True, exist_ok=True)
    init_method = "file://" + str(directory / "rdzv")
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        GLOO_SOCKET_IFNAME="lo",  # gloo stays on the loopback interface
    )
    run = SuiteRun(suite, world_size, directory, deadline_s)
    processes: list[subprocess.Popen[bytes]] = []
    start = time.monotonic()
    try:
        for rank in range(world_size):
            argv = command or [
                sys.executable,
                str(_WORKER_SCRIPT),
                suite,
                str(rank),
                str(world_size),
                init_method,
                str(directory),
            ]
            with (directory / f"rank{rank}.out").open("wb") as output:
                processes.append(
                    subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=directory)
                )
        for process in processes:
            remaining = deadline_s - (time.monotonic() - start)
            try:
                process.wait(timeout=max(remaining, 0.1))
            except subprocess.TimeoutExpired:
                run.hung = True
                break
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    run.seconds = time.monotonic() - start
    run.returncodes = [process.poll() for process in processes]
    run.records = [_read_records(directory / f"rank{rank}.jsonl") for rank in range(world_size)]
    return run


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The 2-rank suite, run once for the module."""
    return run_ranks("pair", 2, tmp_path_factory.mktemp("pair"), PAIR_DEADLINE_S)


@pytest.fixture(scope="module")
def quad(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The 4-rank suite (world group and subgroups [0, 1], [2, 3]), run once."""
    return run_ranks("quad", 4, tmp_path_factory.mktemp("quad"), QUAD_DEADLINE_S)


# ---------------------------------------------------------------------------------------
# Assertions
# ---------------------------------------------------------------------------------------


def _spec(suite: str, name: str) -> dict[str, Any]:
    for scenario in W.SUITES[suite]:
        if scenario["name"] == name:
            return scenario
    raise KeyError(name)


def _lengths(suite: str, name: str, rank: int) -> list[int]:
    return list(_spec(suite, name)["batches"][rank]["lengths"])


def _assert_collectives(record: dict[str, Any], sync: bool, group_ranks: list[int]) -> None:
    """Exactly one all_reduce(MAX) of VECTOR_SIZE int64 over the DP group with sync, none without."""
    events = record["collectives"]
    if not sync:
        assert events == [], f"rank {record['rank']}: collectives without agreement: {events}"
        return
    assert [event["name"] for event in events] == ["all_reduce"], (
        f"rank {record['rank']}: expected exactly one all_reduce, got {events}"
    )
    (event,) = events
    assert event["dtype"] == "torch.int64"
    assert event["shape"] == [VECTOR_SIZE]
    assert event["op_is_max"] is True
    assert event["group_ranks"] == group_ranks


def _assert_same_error(
    records: list[dict[str, Any]], exc_type: str, rank_at_fault: int, *fragments: str
) -> str:
    """Every rank raised ``exc_type`` with one identical message naming the rank at fault."""
    outcomes = [(r["rank"], r["ok"], r.get("error_type")) for r in records]
    assert all(not r["ok"] for r in records), f"some rank did not raise: {outcomes}"
    assert {r["error_type"] for r in records} == {exc_type}, outcomes
    messages = {r["error_message"] for r in records}
    assert len(messages) == 1, f"messages differ between ranks: {messages}"
    (message,) = messages
    assert message.startswith(f"rank {rank_at_fault} of the DP group: "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def _assert_plan(record: dict[str, Any], lengths: list[int], cap: int, force_group_size: int = 1) -> None:
    """Strict (token sum <= cap) and exact (cover of range(n)); micro-batches match indices."""
    rank = record["rank"]
    assert record["ok"], f"rank {rank} raised {record.get('error_message')}"
    indices = record["indices"]
    assert len(indices) == record["n_micro"]
    assert sorted(i for part in indices for i in part) == list(range(len(lengths))), (
        f"rank {rank}: not an exact cover of range({len(lengths)}): {indices}"
    )
    assert all(part and part == sorted(part) for part in indices), indices
    sums = [sum(lengths[i] for i in part) for part in indices]
    assert max(sums) <= cap, f"rank {rank}: micro-batch over the cap {cap}: {sums}"
    # The returned TensorDicts hold exactly those rows, with those effective tokens.
    assert record["mb_sample_ids"] == indices
    assert record["mb_batch_sizes"] == [len(part) for part in indices]
    assert record["mb_token_sums"] == sums
    for part in indices:
        groups = {i // force_group_size for i in part}
        members = {g * force_group_size + k for g in groups for k in range(force_group_size)}
        assert members == set(part), f"rank {rank}: forced group split in {part}"


def _simulate(suite: str, name: str, ranks: list[int]) -> list[list[list[int]]] | Exception:
    """The in-process reference (plan_data_parallel) for ``ranks`` of scenario ``name``."""
    scenario = _spec(suite, name)
    kwargs = W.scenario_kwargs(scenario, ranks[0])
    try:
        return plan_data_parallel([_lengths(suite, name, r) for r in ranks], **kwargs)
    except (TypeError, ValueError) as exc:
        return exc


def _assert_matches_reference(suite: str, name: str, records: list[dict[str, Any]], ranks: list[int]) -> None:
    reference = _simulate(suite, name, ranks)
    mine = [records[r] for r in ranks]
    if isinstance(reference, Exception):
        for record in mine:
            assert record["error_type"] == type(reference).__name__
            assert record["error_message"] == str(reference)
    else:
        assert [record["indices"] for record in mine] == reference


# ---------------------------------------------------------------------------------------
# The launcher itself
# ---------------------------------------------------------------------------------------


def test_launcher_kills_and_reports_a_hang(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    start = time.monotonic()
    run = run_ranks("none", 2, tmp_path, deadline_s=1.0, command=sleeper)
    assert time.monotonic() - start < 30
    assert run.hung
    assert all(code is not None and code != 0 for code in run.returncodes)
    with pytest.raises(pytest.fail.Exception, match=r"hung: killed after 1\.0s"):
        run.scenario("anything")


@pytest.mark.parametrize("suite", ["pair", "quad"])
def test_every_rank_runs_every_scenario(suite: str, request: pytest.FixtureRequest) -> None:
    run: SuiteRun = request.getfixturevalue(suite)
    for rank in range(run.world_size):
        assert "__done__" in run.records[rank], run.diagnosis(rank)
        assert run.returncodes[rank] == 0, run.diagnosis(rank)
        for scenario in W.SUITES[suite]:
            assert scenario["name"] in run.records[rank], run.diagnosis(rank)


# ---------------------------------------------------------------------------------------
# Two ranks, world group
# ---------------------------------------------------------------------------------------


def test_case1_light_rank_follows_heavy_rank(pair: SuiteRun) -> None:
    records = pair.scenario("case1_sync")
    assert [r["n_micro"] for r in records] == [5, 5]
    assert records[0]["mb_token_sums"] == [95] * 5
    assert records[1]["mb_batch_sizes"] == [1] * 5
    assert records[1]["mb_token_sums"] == [20] * 5
    for record in records:
        _assert_plan(record, _lengths("pair", "case1_sync", record["rank"]), 100)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "case1_sync", records, [0, 1])


def test_case1_without_agreement_each_rank_plans_alone(pair: SuiteRun) -> None:
    records = pair.scenario("case1_no_sync")
    assert [r["n_micro"] for r in records] == [5, 1]
    assert records[1]["indices"] == [[0, 1, 2, 3, 4]]
    assert records[1]["mb_token_sums"] == [100]
    for record in records:
        _assert_plan(record, _lengths("pair", "case1_no_sync", record["rank"]), 100)
        _assert_collectives(record, sync=False, group_ranks=[])
    _assert_matches_reference("pair", "case1_no_sync", records, [0, 1])


def test_case2_every_rank_gets_eight(pair: SuiteRun) -> None:
    records = pair.scenario("case2_sync")
    assert [r["n_micro"] for r in records] == [8, 8]
    assert records[0]["mb_token_sums"] == [7] * 8
    assert records[1]["mb_token_sums"] == [1] * 8
    for record in records:
        _assert_plan(record, _lengths("pair", "case2_sync", record["rank"]), 8)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_case3_count_above_a_ranks_samples_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("case3_count_above_samples")
    _assert_same_error(
        records,
        "ValueError",
        1,
        "only 2 samples/groups",
        "3 micro-batches are needed",
        "rank 0 needs 3",
    )
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "case3_count_above_samples", records, [0, 1])


def test_case4_min_num_micro_batch_above_a_ranks_samples(pair: SuiteRun) -> None:
    records = pair.scenario("case4_min_above_samples")
    _assert_same_error(records, "ValueError", 0, "min_num_micro_batch=4", "the 3 samples/groups available")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "case4_min_above_samples", records, [0, 1])


def test_case4_control_min_num_micro_batch_met_everywhere(pair: SuiteRun) -> None:
    records = pair.scenario("case4_min_ok")
    assert [r["n_micro"] for r in records] == [4, 4]
    for record in records:
        _assert_plan(record, _lengths("pair", "case4_min_ok", record["rank"]), 100)
    _assert_matches_reference("pair", "case4_min_ok", records, [0, 1])


def test_case6_batch_not_divisible_by_force_group_size(pair: SuiteRun) -> None:
    records = pair.scenario("case6_not_divisible")
    _assert_same_error(records, "ValueError", 1, "batch size 3 is not divisible by force_group_size=2")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "case6_not_divisible", records, [0, 1])


def test_forced_groups_agree_and_stay_together(pair: SuiteRun) -> None:
    records = pair.scenario("force_group_ok")
    assert [r["n_micro"] for r in records] == [3, 3]
    for record in records:
        lengths = _lengths("pair", "force_group_ok", record["rank"])
        _assert_plan(record, lengths, 100, force_group_size=2)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "force_group_ok", records, [0, 1])


def test_case8_rank_without_attention_mask_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("case8_no_attention_mask")
    _assert_same_error(
        records, "ValueError", 1, "neither an 'attention_mask' nor jagged (nested) 'input_ids'"
    )
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_prepare_micro_batches_missing_setting_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("prepare_missing_budget")
    _assert_same_error(records, "ValueError", 1, "the batch has no 'max_token_len_per_gpu' setting")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_prepare_dynamic_batch_bad_object_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("dataproto_without_from_dict")
    _assert_same_error(records, "ValueError", 1, "data must be DataProto-like")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_divisor_beyond_int64_on_one_rank_is_one_agreed_error(pair: SuiteRun) -> None:
    records = pair.scenario("huge_divisor_one_rank")
    assert [r["ok"] for r in records] == [False, False]
    messages = {(r["error_type"], r["error_message"]) for r in records}
    assert len(messages) == 1
    error_type, message = messages.pop()
    assert error_type == "ValueError"
    assert f"different num_batches_divided_by (from 1 to {2**62})" in message
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_wrong_type_on_one_rank_raises_type_error_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("type_error_one_rank")
    _assert_same_error(records, "TypeError", 1, "max_token_len must be a positive integer", "not an integer")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_unreadable_batch_on_one_rank_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("not_a_tensordict")
    _assert_same_error(records, "ValueError", 0, "the effective lengths could not be read")
    # The rank at fault chains what it caught; its peer has nothing to chain.
    assert [r["cause_type"] for r in records] == ["TypeError", None]
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_lowest_rank_at_fault_is_named_of_two(pair: SuiteRun) -> None:
    records = pair.scenario("both_ranks_at_fault")
    _assert_same_error(records, "ValueError", 0, "sample 1 has 150 tokens", "exceeds max_token_len=100")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_without_agreement_an_error_stays_on_its_rank(pair: SuiteRun) -> None:
    records = pair.scenario("no_sync_error_stays_local")
    assert records[0]["ok"]
    assert records[0]["n_micro"] == 1
    _assert_plan(records[0], _lengths("pair", "no_sync_error_stays_local", 0), 100)
    assert not records[1]["ok"]
    assert records[1]["error_type"] == "ValueError"
    assert records[1]["error_message"].startswith("sample 1 has 150 tokens, which exceeds")
    for record in records:
        _assert_collectives(record, sync=False, group_ranks=[])


def test_balance_off_orders_by_first_index_and_agrees(pair: SuiteRun) -> None:
    records = pair.scenario("balance_off")
    assert [r["n_micro"] for r in records] == [2, 2]
    for record in records:
        _assert_plan(record, _lengths("pair", "balance_off", record["rank"]), 100)
        firsts = [part[0] for part in record["indices"]]
        assert firsts == sorted(firsts)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "balance_off", records, [0, 1])


def test_ranks_disagreeing_on_num_batches_divided_by_raise_together(pair: SuiteRun) -> None:
    records = pair.scenario("divisor_differs_between_ranks")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    assert [r["ok"] for r in records] == [False, False]
    assert {r["error_type"] for r in records} == {"ValueError"}
    messages = {r["error_message"] for r in records}
    assert len(messages) == 1
    assert "different num_batches_divided_by (from 2 to 3)" in messages.pop()


# ---------------------------------------------------------------------------------------
# Four ranks: world group and subgroups
# ---------------------------------------------------------------------------------------


def test_case5_sample_over_cap_on_rank_2_raises_on_all_four(quad: SuiteRun) -> None:
    records = quad.scenario("case5_sample_over_cap")
    _assert_same_error(records, "ValueError", 2, "exceeds max_token_len=100", "sample 1 has 120 tokens")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1, 2, 3])
    _assert_matches_reference("quad", "case5_sample_over_cap", records, [0, 1, 2, 3])


def test_lowest_rank_at_fault_is_named_of_four(quad: SuiteRun) -> None:
    records = quad.scenario("lowest_rank_at_fault")
    _assert_same_error(records, "ValueError", 1, "the batch has no samples")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1, 2, 3])
    _assert_matches_reference("quad", "lowest_rank_at_fault", records, [0, 1, 2, 3])


def test_case7_count_agreed_and_divisible_by_2(quad: SuiteRun) -> None:
    records = quad.scenario("case7_divisible_by_2")
    counts = [r["n_micro"] for r in records]
    assert counts == [6, 6, 6, 6]
    assert counts[0] % 2 == 0
    for record in records:
        _assert_plan(record, _lengths("quad", "case7_divisible_by_2", record["rank"]), 100)
        _assert_collectives(record, sync=True, group_ranks=[0, 1, 2, 3])
    _assert_matches_reference("quad", "case7_divisible_by_2", records, [0, 1, 2, 3])


def test_rounding_above_a_ranks_samples_names_that_rank(quad: SuiteRun) -> None:
    records = quad.scenario("rounding_above_samples")
    _assert_same_error(
        records,
        "ValueError",
        3,
        "8 micro-batches are needed but only 7 samples/groups",
        "rank 0 needs 5, rounded up to 8 for num_batches_divided_by",
    )
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1, 2, 3])
    _assert_matches_reference("quad", "rounding_above_samples", records, [0, 1, 2, 3])


def test_subgroups_agree_separately(quad: SuiteRun) -> None:
    records = quad.scenario("subgroups_agree_separately")
    assert [r["n_micro"] for r in records] == [5, 5, 3, 3]
    assert records[1]["mb_batch_sizes"] == [1] * 5
    for record in records:
        rank = record["rank"]
        _assert_plan(record, _lengths("quad", "subgroups_agree_separately", rank), 100)
        # Each rank talks to its own subgroup only.
        _assert_collectives(record, sync=True, group_ranks=[0, 1] if rank < 2 else [2, 3])
    _assert_matches_reference("quad", "subgroups_agree_separately", records, [0, 1])
    _assert_matches_reference("quad", "subgroups_agree_separately", records, [2, 3])


def test_subgroup_outsiders_need_not_call(quad: SuiteRun) -> None:
    records = quad.scenario("subgroup_outsiders_idle")
    assert [r["called"] for r in records] == [True, True, False, False]
    assert [r["n_micro"] for r in records[:2]] == [3, 3]
    for record in records[:2]:
        _assert_plan(record, _lengths("quad", "subgroup_outsiders_idle", record["rank"]), 100)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_subgroup_error_stays_in_its_subgroup(quad: SuiteRun) -> None:
    records = quad.scenario("subgroup_error_stays_in_subgroup")
    # Subgroup [0, 1] plans (rank 1 needs 4 micro-batches of 60 tokens).
    assert [r["n_micro"] for r in records[:2]] == [4, 4]
    for record in records[:2]:
        lengths = _lengths("quad", "subgroup_error_stays_in_subgroup", record["rank"])
        _assert_plan(record, lengths, 100)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    # Subgroup [2, 3]: global rank 3 is rank 1 of its DP group.
    _assert_same_error(records[2:], "ValueError", 1, "sample 1 has 101 tokens", "exceeds max_token_len=100")
    for record in records[2:]:
        _assert_collectives(record, sync=True, group_ranks=[2, 3])
    _assert_matches_reference("quad", "subgroup_error_stays_in_subgroup", records, [0, 1])


# ---------------------------------------------------------------------------------------
# Case 8: one collective per call, on every rank, in every scenario
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", ["pair", "quad"])
def test_case8_one_all_reduce_per_call_on_every_rank(suite: str, request: pytest.FixtureRequest) -> None:
    run: SuiteRun = request.getfixturevalue(suite)
    for scenario in W.SUITES[suite]:
        records = run.scenario(scenario["name"])
        called = [r for r in records if r["called"]]
        sync = W.scenario_kwargs(scenario, 0).get("same_micro_num_in_dp", True)
        counts = {r["rank"]: len(r["collectives"]) for r in called}
        assert set(counts.values()) == {1 if sync else 0}, (scenario["name"], counts)
        for record in called:
            if scenario.get("group") == "pairs":
                ranks = [0, 1] if W.subgroup_name(scenario, record["rank"]) == "01" else [2, 3]
            else:
                ranks = list(range(run.world_size))
            _assert_collectives(record, sync=sync, group_ranks=ranks)
