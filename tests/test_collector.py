"""The cyclic garbage collector is paused inside the planning calls and restored after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from seqlen_balancing.collector import paused_collector
from seqlen_balancing.global_batch import step
from seqlen_balancing.planning import planner
from seqlen_balancing.planning.planner import analyse, build_plan


@pytest.fixture(autouse=True)
def collector_running() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def recording(seen: list[bool]):  # a workloads callable that notes the collector's state
    def workloads(lengths: list[int]) -> list[int]:
        seen.append(gc.isenabled())
        return list(lengths)

    return workloads


def test_the_count_search_runs_paused_and_the_collector_runs_after() -> None:
    seen: list[bool] = []
    result = analyse([5, 4, 3, 2, 1], 8, workloads=recording(seen))
    assert (seen, result.min_count, gc.isenabled()) == ([False], 2, True)


def test_a_collector_the_caller_stopped_stays_stopped() -> None:
    gc.disable()
    seen: list[bool] = []
    analyse([5, 4, 3], 8, workloads=recording(seen))
    assert (seen, gc.isenabled()) == ([False], False)


def test_a_nested_call_leaves_the_restart_to_the_outer_one() -> None:
    states: list[bool] = []

    @paused_collector
    def outer() -> None:
        analyse([3, 2, 1], 4)
        states.append(gc.isenabled())

    outer()
    assert (states, gc.isenabled()) == ([False], True)


def test_the_collector_restarts_when_the_call_raises() -> None:
    @paused_collector
    def failing() -> None:
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        failing()
    assert gc.isenabled()


def test_the_plan_at_the_count_and_the_step_run_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    balanced = planner.balanced

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return balanced(*args, **kwargs)

    monkeypatch.setattr(planner, "balanced", watched)
    result = analyse([5, 4, 3, 2, 1], 8)
    plan = build_plan(result, 3)
    assert sorted(i for mb in plan for i in mb) == [0, 1, 2, 3, 4] and len(plan) == 3
    assert (seen, gc.isenabled()) == ([False], True)
    step_seen: list[bool] = []
    planned = step.plan_step([6, 5, 4, 3, 2, 1], 2, 8, workloads=recording(step_seen))
    assert planned.count >= 1 and step_seen and not any(step_seen) and gc.isenabled()
