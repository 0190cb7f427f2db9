"""The examples, run as users run them: 2 processes under torchrun's own launcher.

Each example runs once per module (``python -m torch.distributed.run --nproc-per-node 2``
on 127.0.0.1, gloo on CPU, float64) and writes its per-rank results with ``--out``. The
checks compare them with an oracle written here: a dense, padded forward pass of the same
model from its saved weights (no packing, no micro-batches, no collectives), on
- SFT: the concatenation of every rank's batch in one process, loss = sum of token losses
  over all loss tokens / their number; the example's all-reduced gradient must match;
- PPO: each rank's full batch in one pass; the restored log-probs (padded and jagged) must
  match in input order.
"""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(600)]

_ROOT = Path(__file__).resolve().parents[2]
_EXAMPLES = _ROOT / "examples"
WORLD_SIZE = 2
#: Seconds one torchrun launch may take (2 interpreters importing torch on a loaded machine).
LAUNCH_TIMEOUT_S = 240
TOLERANCE = 1e-10


@dataclass
class Run:
    """One torchrun launch of an example: its output and each rank's saved results."""

    stdout: str
    seconds: float
    model: dict[str, torch.Tensor]
    ranks: list[dict[str, Any]]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _torchrun(script: str, out: Path) -> tuple[str, float]:
    """Launch ``examples/<script>`` on 2 local processes; retry if the port was taken."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for _attempt in range(3):
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nproc-per-node", str(WORLD_SIZE),
            "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
            str(_EXAMPLES / script), "--dtype", "float64", "--out", str(out),
        ]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=_ROOT, env=env, capture_output=True, text=True,
                timeout=LAUNCH_TIMEOUT_S, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{script} did not finish within {LAUNCH_TIMEOUT_S}s:\n{exc.stdout}\n{exc.stderr}")
        seconds = time.perf_counter() - start
        if done.returncode == 0:
            return done.stdout, seconds
        if "address already in use" not in (done.stdout + done.stderr).lower():
            break
    pytest.fail(f"{script} exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-6000:]}")


def _launch(script: str, prefix: str, out: Path) -> Run:
    stdout, seconds = _torchrun(script, out)
    print(f"\n{script}: {seconds:.1f} s under torchrun\n{stdout}")
    return Run(
        stdout=stdout,
        seconds=seconds,
        model=torch.load(out / f"{prefix}_model.pt", weights_only=True),
        ranks=[torch.load(out / f"{prefix}_rank{r}.pt", weights_only=True) for r in range(WORLD_SIZE)],
    )


@pytest.fixture(scope="module")
def sft(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _launch("sft_step.py", "sft", tmp_path_factory.mktemp("sft"))


@pytest.fixture(scope="module")
def ppo(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _launch("ppo_logprob.py", "ppo", tmp_path_factory.mktemp("ppo"))


# ---------------------------------------------------------------------------------------
# The oracle: the model's math on a padded batch, from the weights alone
# ---------------------------------------------------------------------------------------


def reference_logits(w: dict[str, torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits ``(n, width, vocab)`` of right-padded ``ids``: one pre-norm block with
    single-head causal attention over the row's real tokens, then an MLP."""
    width, dim = ids.shape[1], w["token_embedding.weight"].shape[1]

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (dim,), w[f"{name}.weight"], w[f"{name}.bias"])

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    x = w["token_embedding.weight"][ids] + w["position_embedding.weight"][:width]
    q, k, v = linear(norm(x, "attention_norm"), "qkv").chunk(3, dim=-1)
    scores = q @ k.transpose(1, 2) / math.sqrt(dim)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    scores = scores.masked_fill(~(causal & mask[:, None, :].bool()), float("-inf"))
    x = x + linear(scores.softmax(dim=-1) @ v, "attention_out")
    hidden = F.gelu(linear(norm(x, "mlp_norm"), "mlp.0"))
    x = x + linear(hidden, "mlp.2")
    return linear(norm(x, "final_norm"), "head")


def reference_log_probs(w: dict[str, torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log p(ids[:, t] | ids[:, :t])`` for ``t >= 1``: ``(n, width - 1)``."""
    logits = reference_logits(w, ids, mask)[:, :-1]
    return logits.log_softmax(dim=-1).gather(-1, ids[:, 1:, None])[..., 0]


def _pad_to(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(tensor, (0, width - tensor.shape[1]))


def _concatenated_batch(run: Run) -> tuple[torch.Tensor, ...]:
    """Every rank's batch, rows one rank after the other, padded to the widest."""
    width = max(rank["batch"]["input_ids"].shape[1] for rank in run.ranks)
    return tuple(
        torch.cat([_pad_to(rank["batch"][key], width) for rank in run.ranks])
        for key in ("input_ids", "attention_mask", "loss_mask")
    )


def _gradient(run: Run, weights_of_rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradient of ``sum(token_loss * weight)`` over the concatenated batch, where
    ``weights_of_rows`` ``(n, width - 1)`` carries the normaliser."""
    ids, mask, _ = _concatenated_batch(run)
    params = {name: value.clone().requires_grad_(True) for name, value in run.model.items()}
    token_loss = -reference_log_probs(params, ids, mask)
    loss = (token_loss * weights_of_rows).sum()
    grads = torch.autograd.grad(loss, list(params.values()))
    return dict(zip(params, grads, strict=True))


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[name] - b[name]).abs().max()) for name in a)


def _lengths(batch: dict[str, torch.Tensor]) -> list[int]:
    return [int(row.sum()) for row in batch["attention_mask"]]


# ---------------------------------------------------------------------------------------
# SFT
# ---------------------------------------------------------------------------------------


def test_sft_gradient_equals_one_process_gradient_on_all_ranks_batches(sft: Run) -> None:
    _, _, loss_mask = _concatenated_batch(sft)
    targets = loss_mask[:, 1:].double()  # token t is a target where loss_mask[t] == 1
    expected = _gradient(sft, targets / targets.sum())
    assert expected["head.weight"].abs().max() > 1e-3  # the oracle is not trivially zero
    for rank, result in enumerate(sft.ranks):
        assert all(g.dtype == torch.float64 for g in result["gradients"].values())
        difference = _max_difference(result["gradients"], expected)
        print(f"rank {rank}: max |SFT gradient - one-process gradient| = {difference:.3e}")
        assert difference < TOLERANCE


def test_sft_tolerance_catches_per_micro_batch_and_per_rank_means(sft: Run) -> None:
    """The two usual normalisation bugs move the gradient far beyond the tolerance."""
    _, _, loss_mask = _concatenated_batch(sft)
    targets = loss_mask[:, 1:].double()
    correct = _gradient(sft, targets / targets.sum())
    per_rank = torch.zeros_like(targets)  # mean over ranks of each rank's token mean
    per_micro_batch = torch.zeros_like(targets)  # mean over micro-batches of token means
    count = sum(len(rank["indices"]) for rank in sft.ranks)
    first = 0
    for rank in sft.ranks:
        rows = slice(first, first + len(rank["batch"]["input_ids"]))
        per_rank[rows] = targets[rows] / targets[rows].sum() / WORLD_SIZE
        for part in rank["indices"]:
            global_rows = [first + i for i in part]
            per_micro_batch[global_rows] = targets[global_rows] / targets[global_rows].sum() / count
        first = rows.stop
    for wrong in (per_rank, per_micro_batch):
        assert _max_difference(_gradient(sft, wrong), correct) > 1e-6


def test_sft_replicas_stay_identical_after_the_step(sft: Run) -> None:
    after = [rank["parameters_after_step"] for rank in sft.ranks]
    for name, value in after[0].items():
        assert torch.equal(value, after[1][name]), name
        assert not torch.equal(value, sft.model[name]), f"{name} did not move"


def _check_plan(indices: list[list[int]], tokens: list[int], lengths: list[int], cap: int) -> None:
    assert sorted(i for part in indices for i in part) == list(range(len(lengths)))
    assert tokens == [sum(lengths[i] for i in part) for part in indices]
    assert max(tokens) <= cap


def test_sft_ranks_run_the_same_micro_batch_count_under_the_cap(sft: Run) -> None:
    counts = [len(rank["indices"]) for rank in sft.ranks]
    assert len(set(counts)) == 1
    lower_bounds = []
    for r, rank in enumerate(sft.ranks):
        lengths = _lengths(rank["batch"])
        _check_plan(rank["indices"], rank["micro_batch_tokens"], lengths, rank["max_token_len"])
        lower_bounds.append(math.ceil(sum(lengths) / rank["max_token_len"]))
        line = re.search(rf"\[rank {r}/2\] sft step: (\d+) micro-batches, tokens per micro-batch "
                         rf"\[([\d, ]+)\] \(cap (\d+)", sft.stdout)
        assert line is not None, sft.stdout
        assert int(line[1]) == counts[r]
        assert [int(t) for t in line[2].split(", ")] == rank["micro_batch_tokens"]
        assert int(line[3]) == rank["max_token_len"]
    # The ranks' own needs differ, so the equal counts come from the DP agreement.
    assert len(set(lower_bounds)) > 1
    assert counts[0] >= max(lower_bounds)


# ---------------------------------------------------------------------------------------
# PPO log-probs
# ---------------------------------------------------------------------------------------


def test_ppo_log_probs_equal_one_full_batch_pass_in_input_order(ppo: Run) -> None:
    for rank, result in enumerate(ppo.ranks):
        ids, mask = result["batch"]["input_ids"], result["batch"]["attention_mask"]
        expected = reference_log_probs(ppo.model, ids, mask) * mask[:, 1:]
        padded = result["padded"]["log_probs"]
        assert padded.dtype == torch.float64
        assert padded.shape == expected.shape
        assert torch.all(padded[mask[:, 1:] == 0] == 0)  # zeros after each sequence
        padded_difference = float((padded - expected).abs().max())
        rows = result["jagged"]["log_probs_rows"]
        lengths = _lengths(result["batch"])
        assert [len(row) for row in rows] == [length - 1 for length in lengths]
        jagged_difference = max(
            float((row - expected[i, : len(row)]).abs().max()) for i, row in enumerate(rows)
        )
        print(f"rank {rank}: max |log-prob - full batch| padded {padded_difference:.3e}, "
              f"jagged {jagged_difference:.3e}")
        assert padded_difference < TOLERANCE
        assert jagged_difference < TOLERANCE


def test_ppo_micro_batches_reorder_rows_so_restoring_matters(ppo: Run) -> None:
    orders = [
        [i for part in rank[layout]["indices"] for i in part]
        for rank in ppo.ranks
        for layout in ("padded", "jagged")
    ]
    assert any(order != sorted(order) for order in orders)


@pytest.mark.parametrize("layout", ["padded", "jagged"])
def test_ppo_ranks_run_the_same_micro_batch_count_under_the_cap(ppo: Run, layout: str) -> None:
    counts = [len(rank[layout]["indices"]) for rank in ppo.ranks]
    assert len(set(counts)) == 1
    label = "right-padded" if layout == "padded" else "jagged"
    for r, rank in enumerate(ppo.ranks):
        plan = rank[layout]
        lengths = _lengths(rank["batch"])
        _check_plan(plan["indices"], plan["micro_batch_tokens"], lengths, rank["max_token_len"])
        line = re.search(rf"\[rank {r}/2\] log-probs, {label}: (\d+) micro-batches, "
                         rf"tokens per micro-batch \[([\d, ]+)\] \(cap (\d+)", ppo.stdout)
        assert line is not None, ppo.stdout
        assert int(line[1]) == counts[r]
        assert [int(t) for t in line[2].split(", ")] == plan["micro_batch_tokens"]
