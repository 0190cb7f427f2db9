"""Where the agreement tensor lives, for any backend (issue 10 point 7 and case 6).

Backends and devices are faked on this CPU machine: the group's backend configuration
(``dist.get_backend_config``, ``dist.get_backend``, ``dist.Backend.backend_capability``) and
the accelerator's availability (``torch.accelerator``, or a device module such as
``torch.cuda``). The expected device is written out for each case, as the issue states it.
"""

from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch
import torch.distributed as dist

import preloaded
from seqlen_balancing.agreement import collective as distributed

pytestmark = [pytest.mark.torch, pytest.mark.no_tensordict, pytest.mark.timeout(120)]

GROUP = object()  # stands for a process group; every torch call on it is faked


def _fake_backend(monkeypatch: pytest.MonkeyPatch, config: str | None, name: str = "") -> None:
    """``config``: what ``dist.get_backend_config`` returns (``None``: it raises, as for a
    group torch has no configuration for); ``name``: what ``dist.get_backend`` returns."""

    def get_backend_config(group: object = None) -> str:
        if config is None:
            raise ValueError("no backend config for this group")
        return config

    monkeypatch.setattr(dist, "get_backend_config", get_backend_config)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: name)


def _fake_accelerator(monkeypatch: pytest.MonkeyPatch, device_type: str | None, index: int = 0) -> None:
    """``torch.accelerator`` reports ``device_type`` (``None``: no accelerator)."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: device_type is not None)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator",
        lambda check_available=False: None if device_type is None else torch.device(device_type),
    )
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: index)


def test_nccl_uses_the_current_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "cuda:nccl", "nccl")
    _fake_accelerator(monkeypatch, "cuda", 3)
    assert distributed.collective_device(GROUP) == torch.device("cuda", 3)


def test_nccl_through_torch_cuda_when_torch_accelerator_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "cuda:nccl", "nccl")
    _fake_accelerator(monkeypatch, None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert distributed.collective_device(GROUP) == torch.device("cuda", 2)


def test_xccl_uses_the_current_xpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "xpu:xccl", "xccl")
    _fake_accelerator(monkeypatch, "xpu", 1)
    assert distributed.collective_device(GROUP) == torch.device("xpu", 1)


def test_issue10_case6_cpu_and_cuda_backends_use_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl")
    _fake_accelerator(monkeypatch, "cuda", 0)
    assert distributed.collective_device(GROUP) == torch.device("cpu")


def test_gloo_uses_the_cpu_even_with_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "cpu:gloo,cuda:gloo", "gloo")
    _fake_accelerator(monkeypatch, "cuda", 0)
    assert distributed.collective_device(GROUP) == torch.device("cpu")


def test_a_backend_named_only_is_read_from_torch_backend_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, None, "nccl")
    _fake_accelerator(monkeypatch, "cuda", 4)
    assert distributed.collective_device(GROUP) == torch.device("cuda", 4)
    _fake_backend(monkeypatch, None, "gloo")
    assert distributed.collective_device(GROUP) == torch.device("cpu")


def test_unknown_backend_uses_the_accelerator_else_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, None, "someone_elses_ccl")
    _fake_accelerator(monkeypatch, "cuda", 5)
    assert distributed.collective_device(GROUP) == torch.device("cuda", 5)
    _fake_accelerator(monkeypatch, None)
    assert distributed.collective_device(GROUP) == torch.device("cpu")


def test_device_backend_without_its_device_falls_back_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_backend(monkeypatch, "cuda:nccl", "nccl")
    _fake_accelerator(monkeypatch, None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.collective_device(GROUP) == torch.device("cpu")


def test_a_device_module_registered_by_a_plugin_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch_npu adds ``torch.npu``; without torch.accelerator the module is asked."""
    _fake_backend(monkeypatch, "npu:hccl", "hccl")
    _fake_accelerator(monkeypatch, None)
    fake_npu = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 6)
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    monkeypatch.setattr(torch, "device", lambda kind, index=None: (kind, index))
    assert distributed.collective_device(GROUP) == ("npu", 6)


# torch.device("npu", i) needs the PrivateUse1 backend renamed to "npu" (what torch_npu
# does); that rename is permanent for a process, so it runs in a child process.
_NPU_SCRIPT = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from seqlen_balancing.agreement import collective as distributed

    torch.utils.rename_privateuse1_backend("npu")
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("npu")
    torch.accelerator.current_device_index = lambda: 1
    group = object()
    # What torch_npu's process group reports: backend config "npu:hccl".
    dist.get_backend_config = lambda group=None: "npu:hccl"
    dist.get_backend = lambda group=None: "hccl"
    print(distributed.collective_device(group))
    # Only the name known, with the capability torch_npu registers for it.
    def no_config(group=None):
        raise ValueError("no config")
    dist.get_backend_config = no_config
    dist.Backend.backend_capability["hccl"] = ["npu"]
    print(distributed.collective_device(group))
    # The NPU not available: the CPU.
    torch.accelerator.is_available = lambda: False
    print(distributed.collective_device(group))
    """
)


@pytest.mark.slow
def test_issue10_case6_hccl_uses_the_current_npu() -> None:
    result = preloaded.run([sys.executable, "-c", _NPU_SCRIPT], timeout=100)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["npu:1", "npu:1", "cpu"]


_GLOO_SCRIPT = textwrap.dedent(
    """
    import tempfile, os
    import torch.distributed as dist
    from seqlen_balancing.agreement import collective as distributed

    path = os.path.join(tempfile.mkdtemp(), "rdzv")
    dist.init_process_group("gloo", init_method="file://" + path, rank=0, world_size=1)
    group = dist.new_group([0])
    print(distributed.collective_device(group), distributed.collective_device(None))
    print(distributed.sync_enabled(None, True), distributed.sync_enabled(group, True),
          distributed.sync_enabled(group, False), distributed.sync_enabled(group, "yes"))
    dist.destroy_process_group()
    """
)


@pytest.mark.distributed
@pytest.mark.slow
def test_real_gloo_group_uses_the_cpu_and_sync_needs_dp_group() -> None:
    result = preloaded.run([sys.executable, "-c", _GLOO_SCRIPT], timeout=100)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "cpu", "False", "True", "False", "True"]
