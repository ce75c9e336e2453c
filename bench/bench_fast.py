"""Benchmark: the fast methods against the plain Checkmate MILP on the same graphs and budgets.

    PYTHONPATH=. python bench/bench_fast.py [--sizes 8,16,...] [--milp-max-n 16]
        [--milp-time-limit 30] [-o bench/results/fast_chains]

For every chain ``remat.graphs.linear(n, unit)`` and budget (fractions of the range from the
smallest feasible budget to the checkpoint-all peak), runs ``chain-dp`` (exact), ``griewank``
(the classical baseline) and, where the graph is small enough, ``milp`` with a time limit.
Writes one row per (graph, budget, method) to CSV and JSON: solve time, cost, proven bound,
gap, and the time ratio milp / chain-dp. Timings are wall clock on a shared machine: noisy.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time

import remat
from remat.schedule.budget import checkpoint_all_peak
from remat.solvers import SolveOptions, solver

FRACTIONS = (0.0, 0.1, 0.3, 0.6)


def budgets(graph) -> list[tuple[float, float]]:
    """(fraction, bytes) from the exact smallest budget (fraction 0) to the full peak (1)."""
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    peak = checkpoint_all_peak(graph)
    return [(f, least + f * (peak - least)) for f in FRACTIONS]


def row(graph_name, n, unit, fraction, budget, sol, wall) -> dict:
    return dict(graph=graph_name, n=n, unit=unit, T=2 * n + 1, budget_fraction=fraction,
                budget_bytes=budget, method=sol.method, status=sol.status,
                cost=sol.compute_cost if sol.feasible else None,
                lower_bound=sol.lower_bound if sol.feasible else None,
                gap=sol.gap, solve_time=round(wall, 4))


def run(sizes, milp_max_n, milp_limit, log=sys.stderr) -> list[dict]:
    rows = []
    have_milp = "milp" in remat.METHODS
    for n in sizes:
        for unit in (True, False):
            graph = remat.graphs.linear(n, unit=unit)
            name = f"linear{n}{'-unit' if unit else ''}"
            for fraction, budget in budgets(graph):
                methods = ["chain-dp", "griewank"]
                if have_milp and n <= milp_max_n:
                    methods.append("milp")
                for method in methods:
                    opts = SolveOptions(time_limit=milp_limit if method == "milp" else None)
                    start = time.perf_counter()
                    sol = solver(method)(graph, budget, opts)
                    rows.append(row(name, n, unit, fraction, budget, sol, time.perf_counter() - start))
                    r = rows[-1]
                    print(f"{name:<16} f={fraction:<4} {method:<9} {r['status']:<10} "
                          f"cost={r['cost']} bound={r['lower_bound']} {r['solve_time']:.3f}s",
                          file=log, flush=True)
    add_ratios(rows)
    return rows


def add_ratios(rows: list[dict]) -> None:
    """Each row gets time_vs_dp = its solve time / chain-dp's on the same graph and budget."""
    dp = {(r["graph"], r["budget_fraction"]): r["solve_time"] for r in rows if r["method"] == "chain-dp"}
    for r in rows:
        base = dp.get((r["graph"], r["budget_fraction"]))
        r["time_vs_dp"] = round(r["solve_time"] / base, 1) if base else None


def write(rows: list[dict], stem: str, command: str) -> None:
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = dict(command=command, machine=platform.platform(), python=platform.python_version(),
                note="wall-clock seconds on a 2-core machine shared with other jobs: noisy")
    with open(stem + ".json", "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="8,16,32,64,128,256")
    p.add_argument("--milp-max-n", type=int, default=16)
    p.add_argument("--milp-time-limit", type=float, default=30.0)
    p.add_argument("-o", "--output", default="bench/results/fast_chains")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = run(sizes, args.milp_max_n, args.milp_time_limit)
    write(rows, args.output, "python bench/bench_fast.py " + " ".join(argv or sys.argv[1:]))
    print(f"wrote {args.output}.csv and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
