"""Benchmarks of milp and the LP methods (not tests). Timings are noisy: a shared 2-core machine.

    PYTHONPATH=. python bench/bench_milp.py sweep  [--time-limit 60] [--out bench/results/milp_sweep.csv]
    PYTHONPATH=. python bench/bench_milp.py speed  [--time-limit 60] [--out bench/results/milp_speed.csv]

``sweep``: linear chains n = 8..64 (unit and heterogeneous) and random DAGs, at 4 budgets from
the smallest feasible one to the checkpoint-all peak, solved by milp, lp-rounding and
lp-randomized: solve time, objective, bound and gap per row.
``speed``: the 16-layer unit chain (T = 33) at budgets 4-7 units, plain Checkmate encoding
against each speed-up of ``milp_model`` (with and without the warm start).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import remat
from remat.schedule.budget import checkpoint_all_peak
from remat.solvers.base import SolveOptions, solver
from remat.solvers.milp import solve_with
from remat.solvers.milp_model import PLAIN, TIGHT, Formulation
from remat.solvers.min_budget import min_budget

VARIANTS = {
    "plain": (PLAIN, False),
    "plain+warm": (PLAIN, True),
    "and": (Formulation(), False),
    "and+warm": (Formulation(), True),
    "and+once+warm": (Formulation(free_once=True), True),
    "tight(and+once+fix)+warm": (TIGHT, True),
    "tight+R-continuous+warm": (Formulation(free_once=True, free_fixing=True, r_binary=False,
                                            free_binary=True), True),
}
FIELDS = ["graph", "T", "budget", "budget_label", "method", "status", "objective", "bound",
          "gap", "solve_time", "peak", "min_budget"]


def row(graph_name, graph, budget, label, method, sol) -> dict:
    feasible = sol.feasible
    return {"graph": graph_name, "T": graph.size, "budget": budget, "budget_label": label,
            "method": method, "status": sol.status,
            "objective": round(sol.compute_cost, 6) if feasible else "",
            "bound": round(sol.lower_bound, 6), "gap": "" if sol.gap is None else round(sol.gap, 6),
            "solve_time": round(sol.solve_time, 3),
            "peak": sol.peak_memory if feasible else "", "min_budget": sol.min_budget or ""}


def sweep_graphs(quick: bool):
    sizes = (8, 16) if quick else (8, 16, 32, 64)
    for n in sizes:
        yield f"linear{n}-unit", remat.graphs.linear(n, unit=True)
        yield f"linear{n}", remat.graphs.linear(n)
    for n, seed in ((10, 1), (20, 3)):
        yield f"random_dag{n}-s{seed}", remat.graphs.random_dag(n, seed=seed)


def sweep_budgets(graph, time_limit: float) -> list[tuple[str, float]]:
    """4 budgets: the smallest feasible one (exact when proven), two between, checkpoint-all."""
    low = min_budget(graph, SolveOptions(time_limit=time_limit))
    high = checkpoint_all_peak(graph)
    tag = "min" if low.status == "optimal" else "min?"
    return [(tag, low.peak_memory), ("33%", low.peak_memory + (high - low.peak_memory) / 3),
            ("67%", low.peak_memory + 2 * (high - low.peak_memory) / 3), ("max", high)]


def sweep(args) -> list[dict]:
    rows = []
    for name, graph in sweep_graphs(args.quick):
        for label, budget in sweep_budgets(graph, args.time_limit):
            for method in ("milp", "lp-rounding", "lp-randomized"):
                sol = solver(method)(graph, budget, SolveOptions(time_limit=args.time_limit))
                rows.append(row(name, graph, budget, label, method, sol))
                print(_line(rows[-1]), flush=True)
    return rows


def speed(args) -> list[dict]:
    graph = remat.graphs.linear(16, unit=True)
    rows = []
    for budget in args.budgets:
        for label, (form, warm) in VARIANTS.items():
            options = SolveOptions(time_limit=args.time_limit, warm_start=warm)
            began = time.perf_counter()
            sol = solve_with(graph, budget, options, form, method=label)
            sol = sol.with_(solve_time=time.perf_counter() - began)
            rows.append(row("linear16-unit", graph, budget, f"{budget:g} units", label, sol))
            print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    return " ".join(f"{k}={r[k]}" for k in ("graph", "budget_label", "method", "status",
                                             "objective", "bound", "gap", "solve_time"))


def write(rows: list[dict], path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("sweep", "speed"))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--budgets", type=float, nargs="*", default=[4, 5, 6, 7])
    parser.add_argument("--quick", action="store_true", help="sweep: chains n = 8, 16 only")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows = sweep(args) if args.mode == "sweep" else speed(args)
    write(rows, args.out or f"bench/results/milp_{args.mode}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
