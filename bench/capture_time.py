"""Capture time of a zoo model at its default size (tracing + grouping + cost model).

    PYTHONPATH=. python bench/capture_time.py vgg16 --batch-size 8 --cost-model profile

Prints one JSON line and appends it to bench/results/capture_time.jsonl. Timings on a shared
CPU are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

import remat
from remat.schedule import checkpoint_all_peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--cost-model", default="profile")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    model, inputs, loss_fn = remat.zoo.load(args.model, tiny=args.tiny, batch_size=args.batch_size)
    start = time.perf_counter()
    cap = remat.capture(model, inputs, loss_fn, cost_model=args.cost_model)
    seconds = time.perf_counter() - start
    graph = cap.graph
    row = dict(model=args.model, tiny=args.tiny, batch=int(inputs[0].shape[0]),
               input=list(inputs[0].shape), cost_model=args.cost_model, nodes=graph.size,
               capture_s=round(seconds, 2), threads=torch.get_num_threads(),
               total_cost=graph.total_cost, static_mib=round(graph.static_mem / 2**20, 1),
               checkpoint_all_peak_mib=round(checkpoint_all_peak(graph) / 2**20, 1))
    print(json.dumps(row))
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/capture_time.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
