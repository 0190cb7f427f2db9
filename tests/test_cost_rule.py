"""One cost rule, every option composing (issue 25), checked against the rule spelled out.

The rule, as the oracle below writes it without the library: a sample costs its given cost
(``costs[i]``) or else its effective length, rounded up to ``pad_to_multiple_of``; a forced
group costs the sum of its samples' costs; a micro-batch costs the sum of its samples'
costs rounded up to ``micro_batch_multiple_of``, and it fits when that is at most
``max_token_len``. Random combinations of every setting (``costs``, ``pad_to_multiple_of``,
``micro_batch_multiple_of``, ``force_group_size``, ``num_batches_divided_by``,
``min_num_micro_batch``, ``num_micro_batches``, ``use_dynamic_bsz_balance``) go through
:func:`plan_micro_batches`, :func:`plan_data_parallel` on 1-4 ranks and
``rearrange_micro_batches`` on 2 gloo ranks; the oracle predicts the outcome from a brute
force over every set partition (``tests/oracles.py``): the count is the fewest fitting
micro-batches, raised to ``min_num_micro_batch`` and rounded up to
``num_batches_divided_by`` (every count between that and the number of groups is feasible,
since splitting a micro-batch never breaks the cap); it is never above verl 0.9.1's rule
(a plain model of it, ``tests/oracles.py``) where that rule applies (no cost settings).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from oracles import brute_force_optimum_cost, model_karmarkar_karp, model_verl_plan, workload
from seqlen_balancing import lower_bound, plan_data_parallel, plan_micro_batches
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse

#: Random combinations per API (the closing note of issue 25 reports these numbers).
LIST_COMBINATIONS = 2000
DP_COMBINATIONS = 800  # on 1-4 ranks
GLOO_ROUNDS = 30  # on 2 gloo ranks


# ---- the rule, spelled out ------------------------------------------------------------------

def ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def sample_cost(i: int, setting: dict[str, Any]) -> int:
    given = setting["costs"]
    base = given[i] if given is not None else setting["lengths"][i]
    return ceil_to(base, setting["pad"])


def micro_batch_cost(indices: list[int], setting: dict[str, Any]) -> int:
    return ceil_to(sum(sample_cost(i, setting) for i in indices), setting["bucket"])


def group_costs(setting: dict[str, Any]) -> list[int]:
    size, n = setting["group"], len(setting["lengths"])
    return [sum(sample_cost(i, setting) for i in range(g, g + size)) for g in range(0, n, size)]


def needed(setting: dict[str, Any]) -> int | str:
    """Micro-batches the rule needs on one rank before rounding (brute force), or
    ``"over"`` when a forced group alone does not fit."""
    groups = group_costs(setting)
    if setting["bucket"] > setting["cap"]:
        return "bucket"  # no micro-batch of any cost fits: refused whatever the samples
    if any(ceil_to(c, setting["bucket"]) > setting["cap"] for c in groups):
        return "over"
    best = brute_force_optimum_cost(groups, setting["cap"], 1, setting["bucket"], groups)
    return max(best, setting["min"] or 1)


def check_plan(plan: list[list[int]], setting: dict[str, Any], count: int, where: object) -> None:
    n, size = len(setting["lengths"]), setting["group"]
    assert len(plan) == count, where
    assert sorted(i for mb in plan for i in mb) == list(range(n)), where  # exact cover
    assert all(mb for mb in plan), where
    assert all(micro_batch_cost(mb, setting) <= setting["cap"] for mb in plan), where  # the cap
    home = {i: b for b, mb in enumerate(plan) for i in mb}
    assert all(home[g] == home[g + j] for g in range(0, n, size) for j in range(size)), where


# ---- random settings ------------------------------------------------------------------------

def random_setting(
    rng: random.Random, shared: dict[str, Any] | None = None, max_groups: int = 7
) -> dict[str, Any]:
    """Lengths and every setting; ``shared`` fixes the settings a DP group shares."""
    setting = dict(shared) if shared else {
        "pad": rng.choice([1, 1, 2, 3, 8]),
        "bucket": rng.choice([1, 1, 4, 16]),
        "group": rng.choice([1, 1, 1, 2, 3]),
        "divisor": rng.choice([None, None, 1, 2, 3]),
        "min": rng.choice([None, None, 1, 2, 3]),
        "balance": rng.random() < 0.5,
        "with_costs": rng.random() < 0.5,
        "cap": 0,
    }
    n = setting["group"] * rng.randint(1, max_groups)
    setting["lengths"] = [rng.choice([0, 1, rng.randint(0, 40), rng.randint(0, 40)]) for _ in range(n)]
    setting["costs"] = [rng.randint(0, 60) for _ in range(n)] if setting["with_costs"] else None
    if not setting["cap"]:
        top = max(group_costs(setting))
        # around the costliest group: now and then just under it (an over-cap error)
        setting["cap"] = max(1, ceil_to(top, setting["bucket"]) + rng.choice([-1, 0, 0, 5, 20, 60]))
    return setting


def kwargs_of(setting: dict[str, Any]) -> dict[str, Any]:
    return {
        "pad_to_multiple_of": setting["pad"], "micro_batch_multiple_of": setting["bucket"],
        "force_group_size": setting["group"], "num_batches_divided_by": setting["divisor"],
        "min_num_micro_batch": setting["min"], "use_dynamic_bsz_balance": setting["balance"],
    }


def verl_applies(setting: dict[str, Any]) -> bool:
    return setting["pad"] == 1 and setting["bucket"] == 1 and setting["costs"] is None


def model_verl_dp_count(settings: list[dict[str, Any]]) -> int | None:
    """verl 0.9.1's count for a DP group, its rule written plainly: the ranks start at the
    largest of their ``min(groups, ceil(total / cap))`` (raised to ``min_num_micro_batch``),
    rounded up to the divisor, and step together until every rank's Karmarkar-Karp
    partition of its groups' workloads fits the cap. ``None`` where verl raises."""
    cap, step = settings[0]["cap"], settings[0]["divisor"] or 1
    ranks = []
    for s in settings:
        size, lengths = s["group"], s["lengths"]
        sizes = [sum(lengths[g : g + size]) for g in range(0, len(lengths), size)]
        loads = [sum(workload(x) for x in lengths[g : g + size]) for g in range(0, len(lengths), size)]
        if max(sizes) > cap or sum(sizes) == 0:
            return None
        ranks.append((sizes, loads))
    start = max(max(min(len(z), -(-sum(z) // cap)), settings[0]["min"] or 1) for z, _ in ranks)
    count = ceil_to(start, step)
    while count <= min(len(z) for z, _ in ranks):
        if all(all(sum(z[g] for g in part) <= cap for part in model_karmarkar_karp(w, count, False))
               for z, w in ranks):
            return count
        count += step
    return None


# ---- the list API ---------------------------------------------------------------------------

def test_the_issue_case_costs_and_alignment_compose() -> None:
    # 65 samples of 250 tokens given as costs 250, aligned to 8: 256 each, 16,640 in all
    assert len(plan_micro_batches([250] * 65, 16384)) == 1
    plan = plan_micro_batches([250] * 65, 16384, costs=[250] * 65, pad_to_multiple_of=8)
    assert len(plan) == 2 and max(len(mb) for mb in plan) <= 64
    assert lower_bound([250] * 65, 16384, costs=[250] * 65, pad_to_multiple_of=8) == 2
    with pytest.raises(ValueError, match=(
        r"sample 0 has 10 tokens and costs 104 tokens \(the cost given, rounded up to a multiple "
        r"of pad_to_multiple_of=8\), which exceeds max_token_len=100.*lower the costs or the alignment"
    )):
        plan_micro_batches([10, 10], 100, costs=[97, 3], pad_to_multiple_of=8)


@pytest.mark.slow
def test_random_combinations_on_the_list_api() -> None:
    rng = random.Random(2025)
    seen = {"plan": 0, "over": 0, "count": 0, "exact": 0, "exact_refused": 0, "verl": 0}
    for number in range(LIST_COMBINATIONS):
        setting = random_setting(rng)
        kwargs = kwargs_of(setting)
        exact = rng.choice([None, None, rng.randint(1, 8)])
        where = (number, setting, exact)
        need = needed(setting)
        n_groups = len(setting["lengths"]) // setting["group"]
        call: dict[str, Any] = {**kwargs, "costs": setting["costs"], "num_micro_batches": exact}
        if need in ("over", "bucket"):
            seen["over"] += 1
            fragment = "exceeds max_token_len" if need == "over" else "micro_batch_multiple_of"
            with pytest.raises(ValueError, match=fragment):
                plan_micro_batches(setting["lengths"], setting["cap"], **call)
            continue
        assert isinstance(need, int)
        analysis = analyse(setting["lengths"], setting["cap"], PlanOptions(**kwargs),
                           costs=setting["costs"])
        # the bounds speak the same cost: never above the optimum
        if (setting["min"] or 1) > n_groups:
            assert analysis.error is not None and "min_num_micro_batch" in str(analysis.error.exception())
        else:
            assert analysis.error is None and analysis.lower_bound <= need, where
        if setting["group"] == 1:
            assert lower_bound(setting["lengths"], setting["cap"], pad_to_multiple_of=setting["pad"],
                               micro_batch_multiple_of=setting["bucket"],
                               costs=setting["costs"]) <= need, where
        count = ceil_to(need, setting["divisor"] or 1)
        if exact is not None:
            fits = exact % (setting["divisor"] or 1) == 0 and need <= exact <= n_groups
            if not fits:
                seen["exact_refused"] += 1
                with pytest.raises(ValueError, match=r"num_micro_batch|micro-batches are needed"):
                    plan_micro_batches(setting["lengths"], setting["cap"], **call)
                continue
            seen["exact"] += 1
            count = exact
        if count > n_groups:
            seen["count"] += 1
            with pytest.raises(ValueError, match=r"min_num_micro_batch|micro-batches are needed but only"):
                plan_micro_batches(setting["lengths"], setting["cap"], **call)
            continue
        seen["plan"] += 1
        plan = plan_micro_batches(setting["lengths"], setting["cap"], **call)
        check_plan(plan, setting, count, where)
        if verl_applies(setting) and exact is None:
            verl = model_verl_plan(setting["lengths"], setting["cap"], setting["divisor"],
                                   setting["min"], setting["group"])
            if verl is not None:
                seen["verl"] += 1
                assert len(plan) <= len(verl), where
    # the seeded combinations reach every outcome
    assert min(seen.values()) >= 5, seen


def test_verl_rule_bound_on_larger_batches() -> None:
    """Beyond brute force: cap and cover under the rule, and never above verl's count."""
    rng = random.Random(7)
    for number in range(40):
        setting = random_setting(rng, max_groups=40)
        setting.update(pad=1, bucket=1, costs=None, with_costs=False)
        setting["cap"] = max(1, max(group_costs(setting)) + rng.choice([0, 10, 40, 120]))
        n_groups = len(setting["lengths"]) // setting["group"]
        if ceil_to(setting["min"] or 1, setting["divisor"] or 1) > n_groups:
            setting.update(min=None, divisor=None)
        plan = plan_micro_batches(setting["lengths"], setting["cap"], **kwargs_of(setting))
        verl = model_verl_plan(setting["lengths"], setting["cap"], setting["divisor"], setting["min"],
                               setting["group"])
        check_plan(plan, setting, len(plan), (number, setting))
        if verl is not None:
            assert len(plan) <= len(verl), (number, setting)


def dp_expected(settings: list[dict[str, Any]], agree: bool) -> tuple[str, Any]:
    """``("plan", counts per rank)`` or ``("raised", (rank, fragment))``."""
    needs = [needed(s) for s in settings]
    groups = [len(s["lengths"]) // s["group"] for s in settings]
    # a rank's own error (the lowest such rank): a group over the cap, or more
    # micro-batches asked by min_num_micro_batch than it has groups
    faults = {"over": "exceeds max_token_len", "bucket": "micro_batch_multiple_of"}
    divisor = settings[0]["divisor"] or 1
    too_many = "micro-batches are needed but only|min_num_micro_batch"
    for r, (x, s) in enumerate(zip(needs, settings, strict=True)):
        if x in faults:
            return "raised", (r, faults[str(x)])
        if (s["min"] or 1) > groups[r]:
            return "raised", (r, "min_num_micro_batch")
        if not agree and ceil_to(int(x), divisor) > groups[r]:
            return "raised", (r, too_many)  # alone, each rank raises in turn
    if agree:
        count = ceil_to(max(int(x) for x in needs), divisor)
        if count > min(groups):
            return "raised", (groups.index(min(groups)), too_many)
        return "plan", [count] * len(settings)
    return "plan", [ceil_to(int(x), divisor) for x in needs]


def test_random_combinations_on_plan_data_parallel() -> None:
    rng = random.Random(4242)
    seen = {"plan": 0, "raised": 0, "verl": 0}
    for number in range(DP_COMBINATIONS):
        world = rng.randint(1, 4)
        first = random_setting(rng, max_groups=5)
        shared = {k: v for k, v in first.items() if k not in ("lengths", "costs")}
        settings = [first] + [random_setting(rng, shared, max_groups=5) for _ in range(world - 1)]
        agree = rng.random() < 0.8
        kind, want = dp_expected(settings, agree)
        costs = [s["costs"] for s in settings] if first["with_costs"] else None
        call = {**kwargs_of(first), "same_micro_num_in_dp": agree, "costs": costs}
        lengths = [s["lengths"] for s in settings]
        where = (number, agree, settings)
        seen[kind] += 1
        if kind == "raised":
            rank, fragment = want
            with pytest.raises(ValueError, match=f"^(DP )?rank {rank}\\b.*({fragment})"):
                plan_data_parallel(lengths, first["cap"], **call)
            continue
        plans = plan_data_parallel(lengths, first["cap"], **call)
        for plan, setting, count in zip(plans, settings, want, strict=True):
            check_plan(plan, setting, count, where)
        if agree and verl_applies(first):
            verl = model_verl_dp_count(settings)
            if verl is not None:
                seen["verl"] += 1
                assert want[0] <= verl, where
    assert min(seen.values()) >= 5, seen


# ---- the TensorDict API, and the switch -----------------------------------------------------

@pytest.mark.torch
def test_the_issue_case_on_rearrange_and_prepare_micro_batches() -> None:
    import torch
    from tensordict import NonTensorData, TensorDict

    from seqlen_balancing import prepare_micro_batches, rearrange_micro_batches

    def batch() -> Any:
        return TensorDict({"attention_mask": torch.ones(65, 250, dtype=torch.long),
                           "row": torch.arange(65)}, [65])

    costs = torch.full((65,), 250)
    mbs, indices = rearrange_micro_batches(batch(), 16384, costs=costs, pad_to_multiple_of=8)
    assert len(mbs) == 2 and max(256 * len(part) for part in indices) <= 16384
    data = batch()
    data["costs"] = costs
    data["max_token_len_per_gpu"] = NonTensorData(16384)
    data["pad_to_multiple_of"] = NonTensorData(8)
    mbs, indices = prepare_micro_batches(data)
    assert indices is not None and len(mbs) == 2
    assert [mb["row"].tolist() for mb in mbs] == indices
    assert len(prepare_micro_batches(data, pad_to_multiple_of=1)[0]) == 1  # the argument wins
    # the static path has no cap: a cost setting given to it would change nothing, so it is
    # refused (verl's default, 1, is accepted); the batch's own entries are its data
    data["use_dynamic_bsz"] = NonTensorData(False)
    data["micro_batch_size_per_gpu"] = NonTensorData(13)
    with pytest.raises(ValueError, match=(
        r"^pad_to_multiple_of=8 applies to the dynamic path \(use_dynamic_bsz=True\) only: the "
        r"static path cuts chunks of micro_batch_size_per_gpu samples"
    )):
        prepare_micro_batches(data, pad_to_multiple_of=8)
    with pytest.raises(ValueError, match=r"^costs applies to the dynamic path"):
        prepare_micro_batches(data, costs=costs, pad_to_multiple_of=1)
    # the batch's own setting is an option too: never silently ignored (issue 30)
    with pytest.raises(ValueError, match=r"^pad_to_multiple_of=8 applies to the dynamic path"):
        prepare_micro_batches(data)
    mbs, indices = prepare_micro_batches(data, pad_to_multiple_of=1, micro_batch_multiple_of=1)
    assert [len(mb) for mb in mbs] == [13] * 5 and indices is None


@pytest.mark.torch
@pytest.mark.slow
def test_the_issue_case_under_the_switch_with_the_alignment_variable(tmp_path: Path) -> None:
    # A Megatron VLM user: SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF set, batches carrying costs.
    from test_verl_switch import run, write_verl

    write_verl(tmp_path)
    result = run(tmp_path, """
        import torch
        from tensordict import NonTensorData, TensorDict
        load()
        switch.apply()
        utils = sys.modules["verl.workers.engine.utils"]
        # 100 text tokens per row, 250 tokens of cost (image tokens counted in): aligned to
        # 8, 65 x 256 = 16,640 > 16,384; costs ignored 65 x 104, alignment ignored 65 x 250
        costs = torch.full((65,), 250)
        batch = TensorDict({"attention_mask": torch.ones(65, 100, dtype=torch.long),
                            "costs": costs}, [65])
        batch["max_token_len_per_gpu"] = NonTensorData(16384)
        prepared, _ = utils.prepare_micro_batches(batch)
        rearranged, _ = utils.rearrange_micro_batches(batch, 16384, costs=costs)
        plain, _ = utils.rearrange_micro_batches(batch, 16384)  # costs are an argument there
        # a static-path call of the same job: the job's alignment is not given to it
        batch["use_dynamic_bsz"] = NonTensorData(False)
        batch["micro_batch_size_per_gpu"] = NonTensorData(5)
        static, indices = utils.prepare_micro_batches(data=batch)
        print(json.dumps(dict(prepared=len(prepared), rearranged=len(rearranged), plain=len(plain),
                              static=len(static), indices=indices)))
    """, {"SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "8"})
    assert (result["prepared"], result["rearranged"], result["plain"]) == (2, 2, 1)
    assert result["static"] == 13 and result["indices"] is None


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_random_combinations_on_two_gloo_ranks(tmp_path: Path) -> None:
    from distributed import _world
    from distributed.test_oracle import _WORKER, DEADLINE_S

    rng = random.Random(99)
    rounds, outcomes = [], []
    for _ in range(GLOO_ROUNDS):
        first = random_setting(rng, max_groups=5)
        shared = {k: v for k, v in first.items() if k not in ("lengths", "costs")}
        settings = [first, random_setting(rng, shared, max_groups=5)]
        outcomes.append(dp_expected(settings, True))
        rounds.append({"ranks": [{
            "entry": "rearrange_micro_batches", "lengths": s["lengths"], "max_token_len": s["cap"],
            "force_group_size": s["group"], "num_batches_divided_by": s["divisor"],
            "min_num_micro_batch": s["min"], "use_dynamic_bsz_balance": s["balance"],
            "left_pad": rng.random() < 0.5, "pad_to_multiple_of": s["pad"],
            "micro_batch_multiple_of": s["bucket"], "costs": s["costs"],
        } for s in settings]})
    assert {kind for kind, _ in outcomes} == {"plan", "raised"}
    records = _world.run_world(_WORKER, 2, rounds, tmp_path, DEADLINE_S)
    for number, (round_, (kind, want)) in enumerate(zip(rounds, outcomes, strict=True)):
        got = [records[rank][number] for rank in range(2)]
        where = (number, round_, got)
        if kind == "plan":
            for rank, record in enumerate(got):
                spec = round_["ranks"][rank]
                setting = {
                    "lengths": spec["lengths"], "costs": spec["costs"], "pad": spec["pad_to_multiple_of"],
                    "bucket": spec["micro_batch_multiple_of"], "cap": spec["max_token_len"],
                    "group": spec["force_group_size"],
                }
                assert "plan" in record, where
                check_plan(record["plan"], setting, want[rank], where)
                assert record["rows"] == record["plan"], where
            continue
        rank, fragment = want
        assert all("raised" in r for r in got) and got[0] == got[1], where  # the same error
        assert got[0]["raised"] == "ValueError", where
        assert re.match(f"rank {rank} of the DP group.*({fragment})", got[0]["message"]), where
