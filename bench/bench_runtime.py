"""Runtime speed: the compiled step's time against the eager step's, on CPU.

    PYTHONPATH=. python bench/bench_runtime.py [--models vgg16,gpt2] [--repeats 15] [--threads 1]

For each zoo model (tiny variant, optionally another batch size): the eager step
(``loss_fn`` + ``backward``) and ``remat.compile``'s step at budget 100% (checkpoint-all:
nothing recomputed) and at a lower budget (chen-greedy), each timed as the median of
``--repeats`` interleaved runs after warm-up (``time_ratio``; ``time_ratio_min`` compares the
fastest runs and ``time_ratio_paired`` is the median of each run's ratio to the eager run just
before it: both steadier on a loaded machine). The ratio at 100% is the runtime's own overhead
(goal <= 1.05). Also records predicted and measured peak bytes of each compiled step.
Writes bench/results/runtime.json and runtime.csv. Timings on a shared CPU are noisy.
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import time

import torch

import remat
from remat.bench.common import eager_step

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn, inputs, model) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    fn(*inputs)
    return time.perf_counter() - start


def compare(name: str, batch_size, budget: str, method: str, repeats: int) -> dict:
    model, inputs, loss_fn = remat.zoo.load(name, tiny=True, batch_size=batch_size)
    step = remat.compile(model, inputs, loss_fn, budget=budget, method=method, cache=False,
                         cost_model="profile")
    eager = eager_step(model, loss_fn)
    for _ in range(2):  # warm-up
        timed(eager, inputs, model)
        timed(step, inputs, model)
    eager_times, step_times = [], []
    for _ in range(repeats):
        eager_times.append(timed(eager, inputs, model))
        step_times.append(timed(step, inputs, model))
    model.zero_grad(set_to_none=True)
    gc.collect()
    _, peak = remat.measure_peak(step, *inputs)
    eager_s, step_s = statistics.median(eager_times), statistics.median(step_times)
    sol = step.solution
    return dict(model=name, batch_size=batch_size, budget=budget, method=method,
                nodes=step.graph.size, recomputed=int(sol.R.sum()) - step.graph.size,
                predicted_overhead=round(sol.overhead, 4), eager_ms=round(eager_s * 1e3, 3),
                step_ms=round(step_s * 1e3, 3), time_ratio=round(step_s / eager_s, 4),
                time_ratio_min=round(min(step_times) / min(eager_times), 4),
                time_ratio_paired=round(statistics.median(
                    s / e for s, e in zip(step_times, eager_times)), 4),
                predicted_peak=int(sol.peak_memory), measured_peak=int(peak),
                peak_ratio=round(peak / sol.peak_memory, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vgg16,resnet50,mobilenet_v2,unet,gpt2")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--low-budget", default="50%")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "runtime"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models.split(","):
        for budget, method in (("100%", "checkpoint-all"), (args.low_budget, "chen-greedy")):
            try:
                row = compare(name, args.batch_size, budget, method, args.repeats)
            except remat.InfeasibleBudgetError as exc:
                print(f"{name} {budget} {method}: infeasible ({exc})")
                continue
            rows.append(row)
            print(json.dumps(row))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = dict(torch=torch.__version__, threads=args.threads, repeats=args.repeats,
                note="medians of interleaved runs on a shared CPU; noisy")
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
