"""DP agreement across real torch.distributed processes, on every public path.

``rearrange_micro_batches``, ``prepare_dynamic_batch`` and ``prepare_micro_batches`` (dynamic
and static); the world group passed as ``dp_group``, subgroups, ``dp_group=None`` (no
agreement, verl 0.9.1's rule), a process outside its group, and a 2-rank fuzz suite over
the malformed-input catalogue of ``_malformed.py``.

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

import preloaded
from seqlen_balancing import plan_data_parallel
from seqlen_balancing.agreement import VECTOR_SIZE

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(240)]

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
    processes: list[preloaded.Started] = []
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
            output = directory / f"rank{rank}.out"
            processes.append(preloaded.popen(argv, output=output, env=env, cwd=directory))
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


def agreement_collectives(names: list[str]) -> bool:
    """The collectives of one agreement: the all_reduce alone (an error read from the
    vector: a count above a rank's samples, modes that differ), or then the one
    all_gather_object of the reports (a rank's own error, settings that differ), which torch
    builds from all_gather calls of its own."""
    second = names[1:2] == ["all_gather_object"] and set(names[2:]) <= {"all_gather"}
    return names[:1] == ["all_reduce"] and (len(names) == 1 or second)


def _assert_collectives(record: dict[str, Any], sync: bool, group_ranks: list[int]) -> None:
    """With sync: exactly one all_reduce(MAX) of VECTOR_SIZE int64 over the DP group when the
    call returns; when it raises, that all_reduce and then one all_gather_object of the
    ranks' reports (torch builds it from all_gather calls of its own), nothing else. None
    without sync."""
    events = record["collectives"]
    if not sync:
        assert events == [], f"rank {record['rank']}: collectives without agreement: {events}"
        return
    names = [event["name"] for event in events]
    if record.get("ok", True):
        assert names == ["all_reduce"], f"rank {record['rank']}: expected one all_reduce, got {events}"
    else:
        assert agreement_collectives(names), f"rank {record['rank']}: {names}"
    event = events[0]
    assert event["dtype"] == "torch.int64"
    assert event["shape"] == [VECTOR_SIZE]
    assert event["op_is_max"] is True
    assert event["group_ranks"] == group_ranks


def _assert_same_error(
    records: list[dict[str, Any]],
    exc_type: str,
    rank_at_fault: int | None,
    *fragments: str,
    global_rank: int | None = None,
) -> str:
    """Every rank raised ``exc_type`` with one identical message naming the rank at fault:
    ``rank R of the DP group (global rank G): ...`` (G defaults to R: the world group).
    ``rank_at_fault=None``: an error of the group, naming no single rank in front."""
    outcomes = [(r["rank"], r["ok"], r.get("error_type")) for r in records]
    assert all(not r["ok"] for r in records), f"some rank did not raise: {outcomes}"
    assert {r["error_type"] for r in records} == {exc_type}, outcomes
    messages = {r["error_message"] for r in records}
    assert len(messages) == 1, f"messages differ between ranks: {messages}"
    (message,) = messages
    if rank_at_fault is None:
        assert not message.startswith("rank "), message
    else:
        glob = rank_at_fault if global_rank is None else global_rank
        assert message.startswith(f"rank {rank_at_fault} of the DP group (global rank {glob}): "), message
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
        # plan_data_parallel knows no global ranks: rank r of these ranks is global ranks[r].
        expected = str(reference)
        for r, glob in enumerate(ranks):
            expected = expected.replace(
                f"rank {r} of the DP group: ", f"rank {r} of the DP group (global rank {glob}): "
            ).replace(f"(rank {r} needs ", f"(rank {r} (global rank {glob}) needs ")
        for record in mine:
            assert record["error_type"] == type(reference).__name__
            assert record["error_message"] == expected
    else:
        assert [record["indices"] for record in mine] == reference


# ---------------------------------------------------------------------------------------
# The launcher itself
# ---------------------------------------------------------------------------------------


def test_launcher_kills_and_reports_a_hang(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    run = run_ranks("none", 2, tmp_path, deadline_s=1.0, command=sleeper)
    assert run.hung
    assert run.returncodes == [-9, -9]  # killed (SIGKILL); a sleep left to finish exits 0
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
        "rank 0 (global rank 0) needs 3",
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
    _assert_same_error(records, "TypeError", 1, "data must be DataProto-like")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_divisor_beyond_int64_on_one_rank_is_one_agreed_error(pair: SuiteRun) -> None:
    records = pair.scenario("huge_divisor_one_rank")
    # Reported as given (2**63), never clipped to an int64 value; both ranks pass it (the
    # options are agreed), and the lowest rank's error is the verdict.
    _assert_same_error(
        records, "ValueError", 0,
        f"{2**63} micro-batches are needed but only 4 samples/groups are available",
        f"rank 0 (global rank 0) needs 1, rounded up to {2**63} for num_batches_divided_by",
    )
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_wrong_type_on_one_rank_raises_type_error_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("type_error_one_rank")
    _assert_same_error(records, "TypeError", 1, "max_token_len must be a positive integer", "not an integer")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_unreadable_batch_on_one_rank_raises_on_every_rank(pair: SuiteRun) -> None:
    records = pair.scenario("not_a_tensordict")
    _assert_same_error(records, "TypeError", 0, "batch must be a TensorDict with a batch dimension")
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


def test_balance_off_orders_heaviest_first_and_agrees(pair: SuiteRun) -> None:
    # without verl's order, agreeing ranks line their micro-batches up heaviest first,
    # so index k weighs about the same on every rank
    records = pair.scenario("balance_off")
    assert [r["n_micro"] for r in records] == [2, 2]
    for record in records:
        lengths = _lengths("pair", "balance_off", record["rank"])
        _assert_plan(record, lengths, 100)
        loads = [sum(24576 * lengths[i] + lengths[i] ** 2 for i in part) for part in record["indices"]]
        assert loads == sorted(loads, reverse=True)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "balance_off", records, [0, 1])


@pytest.mark.parametrize("name", ["champ_step", "champ_step_balance_off"])
def test_champ_step_agrees_on_the_largest_count_a_rank_needs_alone(pair: SuiteRun, name: str) -> None:
    from seqlen_balancing import plan_micro_batches

    records = pair.scenario(name)
    # the oracle: each rank's lengths planned alone, without any DP group
    own = max(len(plan_micro_batches(_lengths("pair", name, r), 4096)) for r in (0, 1))
    assert own == 8
    assert [r["n_micro"] for r in records] == [own, own]
    for record in records:
        lengths = _lengths("pair", name, record["rank"])
        _assert_plan(record, lengths, 4096)
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
        if name == "champ_step_balance_off":
            loads = [sum(24576 * lengths[i] + lengths[i] ** 2 for i in part) for part in record["indices"]]
            assert loads == sorted(loads, reverse=True)
    _assert_matches_reference("pair", name, records, [0, 1])


def test_ranks_disagreeing_on_num_batches_divided_by_raise_together(pair: SuiteRun) -> None:
    records = pair.scenario("divisor_differs_between_ranks")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    assert [r["ok"] for r in records] == [False, False]
    assert {r["error_type"] for r in records} == {"ValueError"}
    messages = {r["error_message"] for r in records}
    assert len(messages) == 1
    assert messages.pop().startswith(
        "the ranks passed different num_batches_divided_by: rank 1 (global rank 1) has "
        "num_batches_divided_by=3 and rank 0 (global rank 0) has num_batches_divided_by=2; ")


# ---------------------------------------------------------------------------------------
# Four ranks: world group and subgroups
# ---------------------------------------------------------------------------------------


def test_issue19_case6_over_cap_advice_covers_every_rank(pair: SuiteRun) -> None:
    # Rank 0 is at fault (lowest rank), but its own longest (10,987) would fail on rank 1.
    records = pair.scenario("advice_covers_the_group")
    message = _assert_same_error(
        records, "ValueError", 0, "sample 0 has 10987 tokens, which exceeds max_token_len=9216",
        "raise max_token_len to at least 12000 ",
    )
    assert "10987 (" not in message and "at least 10987" not in message
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "advice_covers_the_group", records, [0, 1])


def _aligned_sums(lengths: list[int], indices: list[list[int]], pad: int) -> list[int]:
    return [sum(-(-lengths[i] // pad) * pad for i in part) for part in indices]


def test_alignment_one_agreed_count_every_micro_batch_under_the_cap_aligned(pair: SuiteRun) -> None:
    # Issue 21: rank 0's 65 x 250 tokens (16,250) would fit one micro-batch; aligned to 32
    # they cost 16,640, so it needs 2, and rank 1 follows.
    for name in ("aligned_agree", "aligned_prepare_settings"):
        records = pair.scenario(name)
        assert [r["n_micro"] for r in records] == [2, 2], name
        for record in records:
            lengths = _lengths("pair", name, record["rank"])
            _assert_plan(record, lengths, 16_384)
            assert max(_aligned_sums(lengths, record["indices"], 32)) <= 16_384
            _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "aligned_agree", pair.scenario("aligned_agree"), [0, 1])


def test_alignment_sample_over_cap_raises_the_same_error_on_both(pair: SuiteRun) -> None:
    records = pair.scenario("aligned_sample_over_cap")
    _assert_same_error(
        records, "ValueError", 1,
        "sample 0 has 1000 tokens and costs 1024 tokens aligned to a multiple of "
        "pad_to_multiple_of=64, which exceeds max_token_len=1010",
        "raise max_token_len to at least 1024 ",
    )  # fmt: skip
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "aligned_sample_over_cap", records, [0, 1])


def test_padded_one_agreed_count_every_footprint_under_the_cap(pair: SuiteRun) -> None:
    # Issue 26: rows x width. Rank 0 needs 3 micro-batches ([100], [10, 10, 10], [100]),
    # rank 1 (15 rows of 10 fit one) follows; each comes back as wide as its widest row.
    records = pair.scenario("padded_agree")
    assert [r["n_micro"] for r in records] == [3, 3]
    for record in records:
        lengths = _lengths("pair", "padded_agree", record["rank"])
        _assert_plan(record, lengths, 150)
        widest = [max(lengths[i] for i in part) for part in record["indices"]]
        assert record["mb_widths"] == widest
        assert max(len(part) * w for part, w in zip(record["indices"], widest, strict=True)) <= 150
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    assert sorted(len(part) * w for part, w in zip(records[0]["indices"], records[0]["mb_widths"],
                                                   strict=True)) == [30, 100, 100]
    _assert_matches_reference("pair", "padded_agree", records, [0, 1])


def test_padded_row_over_cap_raises_the_same_error_on_both(pair: SuiteRun) -> None:
    records = pair.scenario("padded_row_over_cap")
    _assert_same_error(
        records, "ValueError", 1,
        "sample 1 has 300 tokens; padded=True holds it as 1 row x 320 wide = 320 token "
        "positions", "exceeds max_token_len=256", "raise max_token_len to at least 320 ",
    )  # fmt: skip
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])
    _assert_matches_reference("pair", "padded_row_over_cap", records, [0, 1])


def test_padded_settings_from_the_batch_limit_the_samples(pair: SuiteRun) -> None:
    # 12 rows of 20 (rank 0) and 8 (rank 1) fit 1,000 padded as one; at most 4 samples per
    # micro-batch: rank 0 needs 3, rank 1 (2 alone) follows with 3.
    records = pair.scenario("padded_prepare_settings")
    assert [r["n_micro"] for r in records] == [3, 3]
    for record, rows in zip(records, (12, 8), strict=True):
        _assert_plan(record, [20] * rows, 1_000)
        assert len(record["indices"]) == 3 and max(len(part) for part in record["indices"]) <= 4
        assert record["mb_widths"] == [20, 20, 20]
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


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
        "rank 0 (global rank 0) needs 5, rounded up to 8 for num_batches_divided_by",
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
    _assert_same_error(
        records[2:], "ValueError", 1, "sample 1 has 101 tokens", "exceeds max_token_len=100", global_rank=3
    )
    for record in records[2:]:
        _assert_collectives(record, sync=True, group_ranks=[2, 3])
    _assert_matches_reference("quad", "subgroup_error_stays_in_subgroup", records, [0, 1])


# ---------------------------------------------------------------------------------------
# Case 8: one collective per call, on every rank, in every scenario
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", ["pair", "quad"])
def test_case8_one_all_reduce_per_call_on_every_rank(suite: str, request: pytest.FixtureRequest) -> None:
    """One all_reduce per call on every member of the DP group (then one gather of the
    reports where a rank failed, the same on every member); none without agreement
    (``same_micro_num_in_dp=False`` or ``dp_group=None``) and none on a process outside
    the group it passed."""
    run: SuiteRun = request.getfixturevalue(suite)
    for scenario in W.SUITES[suite]:
        records = run.scenario(scenario["name"])
        for record in (r for r in records if r["called"]):
            rank = record["rank"]
            ranks = W.group_ranks_of(scenario, rank, run.world_size)
            sync = bool(ranks) and rank in ranks and W.scenario_kwargs(scenario, rank).get(
                "same_micro_num_in_dp", True
            )
            assert bool(record["collectives"]) == bool(sync), (scenario["name"], rank)
            _assert_collectives(record, sync=sync, group_ranks=ranks)
        by_group: dict[str, set[str]] = {}
        for r in (r for r in records if r["called"] and r["collectives"]):
            by_group.setdefault(str(r["group_ranks"]), set()).add(str([e["name"] for e in r["collectives"]]))
        assert all(len(names) == 1 for names in by_group.values()), scenario["name"]


# ---------------------------------------------------------------------------------------
# Issue 10: agreement on every path (static path, modes, every input error, subgroups)
# ---------------------------------------------------------------------------------------


def test_issue10_case1_static_batch_not_divisible_names_rank_1(pair: SuiteRun) -> None:
    records = pair.scenario("static_not_divisible")
    _assert_same_error(
        records, "ValueError", 1,
        "batch size 7 is not a positive multiple of micro_batch_size_per_gpu * force_group_size = 2 * 1",
    )
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_issue10_case2_static_counts_4_and_3_raise_on_both(pair: SuiteRun) -> None:
    records = pair.scenario("static_counts_differ")
    message = _assert_same_error(records, "ValueError", None)
    assert (
        "the ranks of the DP group would run different numbers of static micro-batches: "
        "rank 0 (global rank 0) has 4 and rank 1 (global rank 1) has 3" in message
    ), message
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_static_counts_equal_return_chunks_with_one_collective(pair: SuiteRun) -> None:
    records = pair.scenario("static_counts_equal")
    for record in records:
        assert record["ok"], record.get("error_message")
        assert record["static"] is True
        # 8 rows in chunks of micro_batch_size_per_gpu * force_group_size = 4: rows in order.
        assert record["indices"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert record["mb_sample_ids"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_issue10_case3_dynamic_and_static_ranks_raise_the_same_error(pair: SuiteRun) -> None:
    records = pair.scenario("modes_differ")
    message = _assert_same_error(records, "ValueError", None)
    assert (
        "disagree on use_dynamic_bsz: rank 1 (global rank 1) cuts its batch statically "
        "(use_dynamic_bsz=False) but rank 0 (global rank 0) dynamically" in message
    ), message
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_issue10_case4_none_batch_on_rank_1_is_a_type_error_on_both(pair: SuiteRun) -> None:
    records = pair.scenario("prepare_none_on_rank_1")
    _assert_same_error(records, "TypeError", 1, "batch must be a TensorDict with a batch dimension")
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


@pytest.mark.parametrize(
    ("name", "exc_type", "rank", "fragment"),
    [
        ("dataproto_non_tensor_list", "TypeError", 0,
         "every non_tensor_batch entry must be a NumPy array with one row per sample"),
        ("dataproto_non_tensor_rows", "ValueError", 1,
         "a non_tensor_batch array has 3 rows but the batch has 4 samples"),
        ("meta_mask", "ValueError", 1, "the effective lengths could not be read"),
        ("meta_jagged_entry", "ValueError", 1, "entry 'extra' is on the meta device"),
        ("meta_jagged_entry_static", "ValueError", 0, "entry 'extra' is on the meta device"),
        ("cap_beyond_int64", "ValueError", 0,
         f"max_token_len must be a positive integer (>= 1), got {-(2**70)}"),
    ],
)
def test_issue10_input_errors_join_the_agreement(
    pair: SuiteRun, name: str, exc_type: str, rank: int, fragment: str
) -> None:
    records = pair.scenario(name)
    _assert_same_error(records, exc_type, rank, fragment)
    for record in records:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


def test_issue9_case4_dp_group_none_plans_locally_without_a_collective(pair: SuiteRun) -> None:
    records = pair.scenario("local_without_dp_group")
    # 4 and 12 samples of 5 tokens at cap 10: 2 and 6 micro-batches, each rank alone.
    assert [r["n_micro"] for r in records] == [2, 6]
    for record in records:
        _assert_plan(record, _lengths("pair", "local_without_dp_group", record["rank"]), 10)
        _assert_collectives(record, sync=False, group_ranks=[])


@pytest.mark.parametrize(("name", "rank", "count"),
                         [("one_rank_only_local", 0, 2), ("one_rank_only_prepare_local", 1, 2)])
def test_issue9_a_call_on_one_rank_only_never_blocks(
    pair: SuiteRun, name: str, rank: int, count: int
) -> None:
    records = pair.scenario(name)
    assert [r["called"] for r in records] == [r == rank for r in range(2)]
    record = records[rank]
    assert record["ok"], record.get("error_message")
    assert record["n_micro"] == count
    assert record["collectives"] == []  # so it waited on nobody


def test_issue10_case5_cross_subgroups_name_global_rank_3(quad: SuiteRun) -> None:
    records = quad.scenario("cross_subgroups_global_rank")
    # Subgroup [1, 3]: global rank 3 is rank 1 of its DP group.
    message = _assert_same_error(
        [records[1], records[3]], "ValueError", 1, "exceeds max_token_len", global_rank=3
    )
    assert "global rank 3" in message
    assert "sample 1 has 60 tokens, which exceeds max_token_len=16" in message
    for record in (records[1], records[3]):
        _assert_collectives(record, sync=True, group_ranks=[1, 3])
    # Subgroup [0, 2] plans: rank 0 needs 2 micro-batches (26 tokens), rank 2 needs 2 (32).
    assert [records[0]["n_micro"], records[2]["n_micro"]] == [2, 2]
    for rank in (0, 2):
        _assert_plan(records[rank], _lengths("quad", "cross_subgroups_global_rank", rank), 16)
        _assert_collectives(records[rank], sync=True, group_ranks=[0, 2])


def test_cross_subgroups_static_counts_agree_per_subgroup(quad: SuiteRun) -> None:
    records = quad.scenario("cross_subgroups_static")
    # [0, 2] hold 4 rows each (2 chunks of 2); [1, 3] hold 6 rows each (3 chunks).
    assert [r["n_micro"] for r in records] == [2, 3, 2, 3]
    for record in records:
        rank = record["rank"]
        _assert_collectives(record, sync=True, group_ranks=[0, 2] if rank % 2 == 0 else [1, 3])


def test_issue10_outsider_of_dp_group_raises_at_once(quad: SuiteRun) -> None:
    records = quad.scenario("outsider_of_dp_group")
    outsider = records[2]
    assert outsider["ok"] is False
    assert outsider["error_type"] == "ValueError"
    assert outsider["error_message"] == (
        "this process (global rank 2) is not a member of dp_group (a group of 2 ranks), so it "
        "cannot take part in that group's agreement; pass the DP group this process belongs "
        "to, or dp_group=None to plan locally"
    )
    assert outsider["collectives"] == []
    assert [r["n_micro"] for r in records[:2]] == [4, 4]
    for record in records[:2]:
        _assert_collectives(record, sync=True, group_ranks=[0, 1])


# ---------------------------------------------------------------------------------------
# The 2-rank fuzz test: a malformed input on one rank, valid data on the other
# ---------------------------------------------------------------------------------------


def _load_catalogue() -> Any:
    spec = importlib.util.spec_from_file_location("_seqlen_balancing_malformed", _HERE / "_malformed.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


M = _load_catalogue()

#: Seconds the fuzz suite may take (spawn, import, rendezvous and every round).
FUZZ_DEADLINE_S = 150


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The 2-rank fuzz suite (all rounds in one process group), run once."""
    return run_ranks("fuzz", 2, tmp_path_factory.mktemp("fuzz"), FUZZ_DEADLINE_S)


def test_fuzz_catalogue_covers_at_least_25_kinds() -> None:
    names = [kind.name for kind in M.KINDS]
    assert len(names) == len(set(names)) >= 25


def test_fuzz_every_rank_raises_the_identical_error(fuzz: SuiteRun) -> None:
    rounds = int(os.environ.get("AGREEMENT_FUZZ_ROUNDS", W.FUZZ_ROUNDS))
    kinds = {kind.name: kind for kind in M.KINDS}
    seen: set[str] = set()
    for round_index in range(rounds):
        records = fuzz.scenario(f"fuzz{round_index}")
        kind_index, faulty = W.fuzz_round(round_index, len(M.KINDS))
        kind = M.KINDS[kind_index]
        assert {r["kind"] for r in records} == {kind.name}
        assert [r["faulty"] for r in records] == [faulty, faulty]
        seen.add(kind.name)
        where = f"round {round_index}, kind {kind.name!r}, faulty rank {faulty}"
        outcomes = [(r["ok"], r.get("error_type"), r.get("error_message")) for r in records]
        assert all(not ok for ok, _, _ in outcomes), f"{where}: a rank returned: {outcomes}"
        assert len(set(outcomes)) == 1, f"{where}: ranks ended differently: {outcomes}"
        _, error_type, message = outcomes[0]
        assert error_type == kinds[kind.name].error, f"{where}: {outcomes[0]}"
        assert kind.fragment in message, f"{where}: {kind.fragment!r} not in {message!r}"
        if kind.names_faulty_rank:
            prefix = f"rank {faulty} of the DP group (global rank {faulty}): "
            assert message.startswith(prefix), f"{where}: {message!r}"
        else:
            assert not message.startswith("rank "), f"{where}: {message!r}"
        names = [r["collectives"] for r in records]
        assert names[0] == names[1] and agreement_collectives(names[0]), where
    assert seen == set(kinds) or rounds < len(kinds)
    for rank in range(2):
        assert "__done__" in fuzz.records[rank], fuzz.diagnosis(rank)
        assert fuzz.returncodes[rank] == 0, fuzz.diagnosis(rank)


# ---------------------------------------------------------------------------------------
# Issue 20: poisoned batches (every entry kind TensorDict allows) on one of 2 ranks
# ---------------------------------------------------------------------------------------


if str(_HERE) not in sys.path:  # _poisoned imports _malformed, as the worker does
    sys.path.insert(0, str(_HERE))
POISONED = importlib.import_module("_poisoned")

#: Seconds the poison suite may take (spawn, import, rendezvous and every round).
POISON_DEADLINE_S = 120


@pytest.fixture(scope="module")
def poison(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The 2-rank poison suite (every round in one process group), run once."""
    return run_ranks("poison", 2, tmp_path_factory.mktemp("poison"), POISON_DEADLINE_S)


def test_poisoned_batch_on_one_rank_ends_the_same_on_both(poison: SuiteRun) -> None:
    """Each poisoned batch, on rank 0 and then on rank 1, the peer valid: both ranks raise
    the identical exception (the catalogue's type and message, naming the poisoned rank)
    or both return the larger of the two ranks' counts, each with one all_reduce (a rank
    left waiting in it would end in gloo's timeout error instead, or be killed at the
    suite's deadline)."""
    for round_index in range(2 * len(POISONED.POISONS)):
        kind = POISONED.POISONS[round_index // 2]
        faulty = round_index % 2
        records = poison.scenario(f"poison{round_index}")
        where = f"round {round_index}, kind {kind.name!r}, poisoned rank {faulty}"
        assert [(r["kind"], r["faulty"]) for r in records] == [(kind.name, faulty)] * 2, where
        outcomes = [(r["ok"], r.get("n_micro"), r.get("error_type"), r.get("error_message"))
                    for r in records]
        assert len(set(outcomes)) == 1, f"{where}: ranks ended differently: {outcomes}"
        ok, count, error_type, message = outcomes[0]
        if kind.error is None:  # the agreed count: the larger of the two ranks' counts
            assert ok and count == max(kind.count, POISONED.PEER_COUNT[kind.peer]), where
        else:
            assert not ok and error_type == kind.error, f"{where}: {outcomes[0]}"
            assert message.startswith(f"rank {faulty} of the DP group (global rank {faulty}): ")
            assert kind.fragment in message, f"{where}: {message!r}"
        names = [r["collectives"] for r in records]
        assert names[0] == names[1] and agreement_collectives(names[0]), where
        assert not ok or len(names[0]) == 1, where  # a call that returns made one all_reduce
    for rank in range(2):
        assert "__done__" in poison.records[rank], poison.diagnosis(rank)
        assert poison.returncodes[rank] == 0, poison.diagnosis(rank)
