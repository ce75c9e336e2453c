"""Benchmark: the one simulator and ``tighten`` on schedules of real size.

    PYTHONPATH=. python bench/bench_simulator.py [--graphs gpt2-op,random_dag100,...]
        [--budget 40%] [--seconds 1.5] [-o bench/results/simulator]

For each graph (the tiny zoo in bench/graphs/ by name, or ``random_dagN``), retention's
schedule at ``--budget`` (5 s) is the input; each of ``simulate``, ``tighten``,
``cheapest_r`` and ``s_from_r`` runs on it for ``--seconds`` and its mean time per call is
written (milliseconds), with the graph size T and the schedule's number of computations.
Every solver prices its candidates with these calls, so their time bounds how many schedules
a time-limited search (retention's, descent's) can try. Wall clock on a shared machine: noisy.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

import remat
from remat.schedule.rs import cheapest_r, s_from_r, tighten
from remat.schedule.simulate import simulate

GRAPH_DIR = Path(__file__).parent / "graphs"
GRAPHS = "gpt2-op,random_dag100,resnet50-module,resnet50-op,random_dag250,random_dag500"


def load(name: str) -> remat.RematGraph:
    if name.startswith("random_dag"):
        return remat.graphs.random_dag(int(name[len("random_dag"):]), seed=0)
    return remat.RematGraph.from_json(GRAPH_DIR / f"{name}.json")


def per_call(run, seconds: float) -> float:
    """Mean milliseconds per call of ``run`` over about ``seconds``."""
    calls, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        run()
        calls += 1
    return (time.perf_counter() - began) / calls * 1e3


def measure(name: str, budget: str, seconds: float) -> dict:
    graph = load(name)
    sol = remat.solve(graph, budget, method="retention", time_limit=5)
    R, S = np.asarray(sol.R, dtype=bool), np.asarray(sol.S, dtype=bool)
    calls = {"simulate": lambda: simulate(graph, R, S), "tighten": lambda: tighten(graph, S),
             "cheapest_r": lambda: cheapest_r(graph, S), "s_from_r": lambda: s_from_r(graph, R)}
    row = {"graph": name, "T": graph.size, "computations": int(R.sum())}
    row.update({f"{key}_ms": round(per_call(run, seconds), 4) for key, run in calls.items()})
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=GRAPHS)
    parser.add_argument("--budget", default="40%")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("-o", "--output", default="bench/results/simulator")
    args = parser.parse_args(argv)
    rows = []
    for name in args.graphs.split(","):
        rows.append(measure(name, args.budget, args.seconds))
        print(rows[-1], flush=True)
    out = Path(args.output)
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "PYTHONPATH=. python " + " ".join(sys.argv)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    plot(rows, out.with_suffix(".png"), command)


def plot(rows: list[dict], path: Path, command: str) -> None:
    """Milliseconds per call against the graph size, one line per function."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = sorted(rows, key=lambda r: r["T"])
    for key in ("simulate", "tighten", "cheapest_r", "s_from_r"):
        ax.plot([r["T"] for r in rows], [r[f"{key}_ms"] for r in rows], marker="o", label=key)
    ax.set_xlabel("nodes T")
    ax.set_ylabel("ms per call")
    ax.set_title("The simulator and tighten on retention's schedules", fontsize=10)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, command, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
