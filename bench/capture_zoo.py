"""Capture every zoo model and compare predicted and measured peak memory (CPU).

    PYTHONPATH=. python bench/capture_zoo.py [--full] [--no-run] [--cost-model unit] [--models a,b]

For each model: node count, capture time, static memory, the checkpoint-all peak predicted
from the graph, the measured peak of ``Capture.run`` (the captured step, nothing
recomputed) and of the plain eager step. Writes bench/results/capture_zoo[_full].json.

The first step runs with ``p.grad`` None: each fresh gradient becomes ``p.grad`` (already in
``static_mem``), so the gradient part of the nodes' workspace goes unused;
``predicted_first_step`` is the prediction with only the internal temporaries as workspace
(node meta ``internal_bytes``). The next step (checkpoint-all through the runtime, ``p.grad`` now set)
makes each gradient next to ``p.grad``: ``measured_accumulating`` is compared with
``predicted``, which counts that workspace on its node.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch

import remat
from remat.bench.common import eager_step
from remat.runtime.step import CompiledStep
from remat.schedule import checkpoint_all_peak


def measure(name: str, tiny: bool, cost_model: str, batch_size=None, run=True) -> dict:
    model, inputs, loss_fn = remat.zoo.load(name, tiny=tiny, batch_size=batch_size)
    # kept as numpy arrays: measure_peak counts every live tensor, and a copy is not the step's
    state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    start = time.perf_counter()
    cap = remat.capture(model, inputs, loss_fn, cost_model=cost_model)
    seconds = time.perf_counter() - start
    graph = cap.graph
    predicted = checkpoint_all_peak(graph)
    row = dict(model=name, tiny=tiny, batch=int(inputs[0].shape[0]), nodes=graph.size,
               forward=len(graph.forward_nodes), capture_s=round(seconds, 2),
               static_mem=graph.static_mem, predicted=predicted)
    if not run:
        return row
    gc.collect()
    torch.manual_seed(0)
    loss_run, run_peak = remat.measure_peak(cap.run, *inputs)
    first = checkpoint_all_peak(graph.with_workspace(
        [float(m.get("internal_bytes", 0)) for m in graph.node_meta]))
    accumulating = _accumulating_peak(cap, inputs)
    model.zero_grad(set_to_none=True)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    del cap
    gc.collect()
    torch.manual_seed(0)
    loss_eager, eager_peak = remat.measure_peak(eager_step(model, loss_fn), *inputs)
    return dict(row, measured_run=run_peak, measured_eager=eager_peak,
                ratio=round(predicted / run_peak, 4), eager_ratio=round(eager_peak / run_peak, 4),
                same_loss=bool(torch.allclose(loss_run, loss_eager)),
                predicted_first_step=first, first_step_ratio=round(first / run_peak, 4),
                measured_accumulating=accumulating,
                accumulating_ratio=round(predicted / accumulating, 4))


def _accumulating_peak(cap, inputs) -> int:
    """Measured peak of a checkpoint-all step run through the runtime while ``p.grad`` holds
    the previous step's gradients."""
    solution = remat.solve(cap.graph, checkpoint_all_peak(cap.graph), method="checkpoint-all")
    step = CompiledStep(cap, solution)
    assert all(p.grad is not None for p in cap.model.parameters() if p.requires_grad)
    gc.collect()
    torch.manual_seed(0)
    return remat.measure_peak(step, *inputs)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="default sizes instead of tiny")
    parser.add_argument("--cost-model", default="unit")
    parser.add_argument("--models", default=",".join(remat.zoo.NAMES))
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--no-run", action="store_true", help="capture only, do not measure")
    parser.add_argument("--out", default=None, help="JSON file (default bench/results/...)")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        row = measure(name, not args.full, args.cost_model, args.batch_size, not args.no_run)
        rows.append(row)
        print(json.dumps(row), flush=True)
        gc.collect()
    os.makedirs("bench/results", exist_ok=True)
    path = args.out or f"bench/results/capture_zoo{'_full' if args.full else ''}.json"
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
