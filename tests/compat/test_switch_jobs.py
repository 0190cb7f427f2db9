"""The verl switch in verl 0.9.1's running parts (issue 18), each in an interpreter of its own:
verl's FSDP engine (``FSDPEngineWithLMHead.forward_backward_batch`` on a one-layer random
Llama, ``_fsdp_engine_check.py``) and two Ray workers of verl's ``RayWorkerGroup`` in a
gloo group (``_ray_switch_check.py``). Apart from ``test_switch.py`` so that pytest-xdist's
workers share the two files (a file runs on one worker).
"""

from __future__ import annotations

import time

import pytest

from compat._scripts import run_script
from compat.test_switch import OUR_COUNT, VERL_COUNT

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)


@pytest.mark.timeout(300)
def test_fsdp_engine_forward_backward_batch_on_a_tiny_model() -> None:
    report = run_script("_fsdp_engine_check.py", timeout=240, SEQLEN_BALANCING_VERL="1")
    assert report["micro_batches"] == {"switched": OUR_COUNT, "library": OUR_COUNT, "verl": VERL_COUNT}
    assert report["loss_equal"] is True and report["grads_equal"] is True
    assert report["output_equal"] is True
    losses, verl_losses = report["losses"], report["verl_losses"]
    assert isinstance(losses, list) and isinstance(verl_losses, list)
    assert len(losses) == OUR_COUNT and len(verl_losses) == VERL_COUNT


@pytest.mark.timeout(480)  # a local Ray cluster starts in 20-40 s; the check itself takes seconds
def test_ray_actors_switched_through_runtime_env_agree_on_the_librarys_count() -> None:
    start = time.perf_counter()
    report = run_script("_ray_switch_check.py", timeout=420)
    wall = time.perf_counter() - start
    ranks = report["ranks"]
    assert isinstance(ranks, list) and len(ranks) == 2
    for rank in ranks:
        assert rank["variable"] == "1"  # it came through runtime_env only: the driver has none
        assert rank["switched"] is True and rank["replacements"] >= 13
        assert rank["count"] == rank["library_count"] == rank["agreed"]
        assert rank["verl_count"] != rank["count"]
    assert report["driver_variable"] is None
    print(f"\nRay: counts {[r['count'] for r in ranks]} (verl's rule: {[r['verl_count'] for r in ranks]}), "
          f"{wall:.1f} s wall")
