"""Run by test_switch.py: a local Ray cluster (2 CPUs) and two workers started by verl's own
``RayWorkerGroup`` (as verl's trainer starts its actors), with SEQLEN_BALANCING_VERL=1 passed
only through the job's ``runtime_env`` env_vars (what
``+ray_kwargs.ray_init.runtime_env.env_vars.SEQLEN_BALANCING_VERL=1`` makes verl do); this
driver's environment has no such variable.

Each worker, after start-up, imports verl's engine utils, joins a two-rank gloo group (TCP on
127.0.0.1) and calls verl's ``prepare_micro_batches`` with ``dp_group``. Rank 0's lengths
[2, 6, 6, 5, 5] need 3 micro-batches under verl's rule at cap 12, 2 under the library's;
rank 1's [4, 4, 4] need 1. Both ranks then switch back (revert) and call verl's own function
with the same data, which agrees on 3. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings
from typing import Any

import ray

LENGTHS = {0: [2, 6, 6, 5, 5], 1: [4, 4, 4]}
CAP = 12

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from verl.single_controller.base.worker import Worker
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


@ray.remote
class SwitchWorker(Worker):  # type: ignore[misc]
    def plan(self, port: int) -> dict[str, Any]:
        import torch
        import torch.distributed as dist
        from tensordict import NonTensorData, TensorDict

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import verl.utils.seqlen_balancing as verl_functions
            import verl.workers.engine.utils as engine_utils

        import seqlen_balancing
        import seqlen_balancing.verl as switch
        from seqlen_balancing.agreement import plan_data_parallel

        rank = int(os.environ["RANK"])
        switched = engine_utils.prepare_micro_batches is seqlen_balancing.prepare_micro_batches
        replacements = len(switch.replacements())
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        verl_functions.get_device_name = lambda: "cpu"  # verl's agreement asks for CUDA otherwise

        def batch() -> TensorDict:
            rows = [torch.arange(n) for n in LENGTHS[rank]]
            data = TensorDict(
                {"input_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged)},
                batch_size=[len(rows)],
            )
            data["max_token_len_per_gpu"] = NonTensorData(CAP)
            return data

        try:
            micro, _ = engine_utils.prepare_micro_batches(batch(), dp_group=dist.group.WORLD)
            switch.revert()
            verl_micro, _ = engine_utils.prepare_micro_batches(batch(), dp_group=dist.group.WORLD)
        finally:
            dist.destroy_process_group()
        agreed = {len(plan) for plan in plan_data_parallel([LENGTHS[0], LENGTHS[1]], CAP)}
        return {
            "rank": rank, "pid": os.getpid(), "variable": os.environ.get("SEQLEN_BALANCING_VERL"),
            "switched": switched, "replacements": replacements, "count": len(micro),
            "library_count": len(plan_data_parallel([LENGTHS[0], LENGTHS[1]], CAP)[rank]),
            "agreed": agreed.pop() if len(agreed) == 1 else sorted(agreed), "verl_count": len(verl_micro),
        }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    assert "SEQLEN_BALANCING_VERL" not in os.environ
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=True,
        runtime_env={"env_vars": {"SEQLEN_BALANCING_VERL": "1", "GLOO_SOCKET_IFNAME": "lo"}},
    )
    try:
        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
        group = RayWorkerGroup(
            resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=SwitchWorker),
            name_prefix="seqlen_balancing_switch", device_name="cpu",
        )
        ranks = group.execute_all_sync("plan", port=free_port())
    finally:
        ray.shutdown()
    print(json.dumps({"ranks": sorted(ranks, key=lambda r: r["rank"]),
                      "driver_variable": os.environ.get("SEQLEN_BALANCING_VERL")}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
