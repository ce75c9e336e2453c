"""Compute overhead against budget for several methods on one graph: CSV, JSON and PNG."""
from __future__ import annotations

import csv
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.budget import checkpoint_all_peak, parse_budget
from remat.solvers import SolveOptions, interrupt, solver
from remat.solvers.base import method_applies


@dataclass(frozen=True)
class SweepRow:
    method: str
    budget_fraction: float
    budget_bytes: float
    status: str
    overhead: float
    peak_bytes: float
    lower_bound_overhead: float
    solve_time: float


def default_fractions(count: int = 10) -> list[float]:
    """Budgets as fractions of the checkpoint-all activation memory, tight to unconstrained."""
    return [round(f, 3) for f in np.linspace(0.1, 1.0, count)]


def run_sweep(graph: RematGraph, methods: list[str], fractions: list[float],
              time_limit: float | None = None, log=sys.stderr) -> list[SweepRow]:
    with interrupt.catching():  # Ctrl-C: stop after the solve it cuts short
        return _sweep(graph, methods, fractions, time_limit, log)


def _sweep(graph: RematGraph, methods: list[str], fractions: list[float],
           time_limit: float | None, log) -> list[SweepRow]:
    rows = []
    options = SolveOptions(time_limit=time_limit)
    total = graph.total_cost
    budgets = [parse_budget(f"{fraction * 100}%", graph) for fraction in fractions]
    for method in methods:
        fn = solver(method)
        if not method_applies(method, graph):
            continue
        for fraction, budget in zip(fractions, budgets):
            start = time.perf_counter()
            if interrupt.requested():  # Ctrl-C cut a solve short: the rows so far
                if log is not None:
                    print("  interrupted: the sweep stops here", file=log, flush=True)
                return rows
            sol = fn(graph, budget, options)
            rows.append(SweepRow(method, fraction, budget, sol.status,
                                 sol.overhead if sol.feasible else float("nan"),
                                 sol.peak_memory if sol.feasible else float("nan"),
                                 sol.lower_bound / total if total else 1.0, sol.solve_time))
            if log is not None:
                shown = f"{sol.overhead:.3f}x" if sol.feasible else sol.status
                print(f"  {method:<14} budget {fraction:>6.1%}: {shown:<10} "
                      f"({time.perf_counter() - start:.2f}s)", file=log, flush=True)
    return rows


def write_sweep(rows: list[SweepRow], graph: RematGraph, out_dir: str, command: str,
                title: str) -> dict[str, str]:
    """Write sweep.csv, sweep.json (with the command that made it) and sweep.png."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f"sweep.{k}") for k in ("csv", "json", "png")}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(SweepRow.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    meta = {"command": command, "title": title, "nodes": graph.size,
            "static_mem": graph.static_mem, "checkpoint_all_peak": checkpoint_all_peak(graph),
            "rows": [asdict(r) for r in rows]}
    with open(paths["json"], "w") as f:
        json.dump(meta, f, indent=2, default=float)
    plot_sweep(rows, paths["png"], title)
    return paths


def plot_sweep(rows: list[SweepRow], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method and r.status != "infeasible"]
        if mine:
            ax.plot([r.budget_fraction * 100 for r in mine], [r.overhead for r in mine],
                    marker="o", label=method)
    ax.set_xlabel("budget (% of checkpoint-all activation memory)")
    ax.set_ylabel("compute overhead (x plain step)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
