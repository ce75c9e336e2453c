"""Capture every zoo model and compare predicted and measured peak memory (CPU).

    PYTHONPATH=. python bench/capture_zoo.py [--full] [--no-run] [--cost-model unit] [--models a,b]

For each model: node count, capture time, static memory, the checkpoint-all peak predicted
from the graph, the measured peak of ``Capture.run`` (the captured step, nothing
recomputed) and of the plain eager step. Writes bench/results/capture_zoo[_full].json.
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
    model.zero_grad(set_to_none=True)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    del cap
    gc.collect()
    torch.manual_seed(0)
    loss_eager, eager_peak = remat.measure_peak(eager_step(model, loss_fn), *inputs)
    return dict(row, measured_run=run_peak, measured_eager=eager_peak,
                ratio=round(predicted / run_peak, 4), eager_ratio=round(eager_peak / run_peak, 4),
                same_loss=bool(torch.allclose(loss_run, loss_eager)))


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
