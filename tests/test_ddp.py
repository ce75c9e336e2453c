"""remat.compile under DistributedDataParallel: 2 CPU processes (gloo) train a few steps with
a compiled step and with plain DDP; parameters and buffers must agree. Bounded in time: the
workers are killed if they have not finished within TIMEOUT seconds."""
from __future__ import annotations

import copy
import json
import os
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
dist = pytest.importorskip("torch.distributed")

WORLD = 2
STEPS = 3
TIMEOUT = 240


class Net(torch.nn.Module):
    """Convolution, BatchNorm (buffers DDP broadcasts), a chain deep enough to recompute."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        layers = []
        for _ in range(6):
            layers += [torch.nn.Linear(32, 32), torch.nn.Tanh()]
        self.mlp = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x))).mean(dim=1).flatten(1)  # [B, 32] from 4x8 images
        return self.head(self.mlp(h))


def loss_fn(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    import remat
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # two workers on a small shared machine
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        model = Net()
        plain = DDP(copy.deepcopy(model))
        compiled = DDP(model)
        torch.manual_seed(100 + rank)  # each rank its own data
        x, y = torch.randn(64, 3, 4, 8), torch.randint(0, 4, (64,))
        step = remat.compile(compiled, (x, y), loss_fn, budget="100%", method="chen-sqrtn",
                             cache=False, cost_model="unit")
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, compiled)]
        losses = []
        for _ in range(STEPS):
            eager_loss = loss_fn(plain, x, y)
            eager_loss.backward()
            loss = step(x, y)
            for opt in opts:
                opt.step()
                opt.zero_grad()
            losses.append((float(eager_loss), float(loss)))
        report = {"recomputed": int(step.solution.R.sum()) - step.graph.size, "losses": losses,
                  "params": _all_close(plain.module.parameters(), model.parameters()),
                  "buffers": _all_close(plain.module.buffers(), model.buffers()),
                  "synced": _same_on_all_ranks(model)}
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(report, f)
    finally:
        dist.destroy_process_group()
    # The report is written. Skip the interpreter's teardown: gloo's threads there aborted the
    # process ("terminate called without an active exception", SIGABRT) in 2 to 3 of 6 runs
    # on this machine, failing the test after everything it checks had passed.
    os._exit(0)


def _all_close(a, b) -> bool:
    return all(torch.allclose(p.float(), q.float()) for p, q in zip(a, b))


def _same_on_all_ranks(model) -> bool:
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(WORLD)]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered)


def test_compiled_step_trains_like_plain_ddp(tmp_path):
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    context = mp.start_processes(_worker, args=(str(tmp_path / "init"), str(tmp_path)),
                                 nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT
    try:
        while not context.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"DDP workers did not finish within {TIMEOUT} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(5)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    for report in reports:
        assert report["recomputed"] > 0
        for eager_loss, loss in report["losses"]:
            assert loss == pytest.approx(eager_loss, rel=1e-5, abs=1e-6)
        assert report["params"] and report["buffers"] and report["synced"]
    assert reports[0]["losses"] != reports[1]["losses"]  # the ranks really had their own data


def test_gradient_buckets_respect_the_cap_and_dtype():
    from remat.runtime.distributed import _buckets

    grads = [torch.zeros(10), torch.zeros(10), torch.zeros(30), torch.zeros(5, dtype=torch.float64),
             torch.zeros(2, dtype=torch.float64)]
    buckets = _buckets(grads, cap=80)  # float32: 40 B each, then 120 B alone; float64 apart
    assert [[g.numel() for g in b] for b in buckets] == [[10, 10], [30], [5, 2]]
    assert [id(g) for b in buckets for g in b] == [id(g) for g in grads]  # each once, in order
