"""Benchmark: the fast methods against the plain Checkmate MILP on the same graphs and budgets.

    PYTHONPATH=. python bench/bench_fast.py chains [--sizes 8,16,...] [--milp-max-n 16]
        [--time-limit 30] [-o bench/results/fast_chains]
    PYTHONPATH=. python bench/bench_fast.py dags [--time-limit 30] [-o bench/results/fast_dags]
    PYTHONPATH=. python bench/bench_fast.py sweep [--sizes 128,256,384] [--time-limit 60]
        [-o bench/results/fast_sweep]
    PYTHONPATH=. python bench/bench_fast.py strided [--sizes 384,512] [--time-limit 60]
        [-o bench/results/fast_strided]

``chains``: for every chain ``remat.graphs.linear(n, unit)`` and budget (fractions of the range
from the smallest feasible budget to the checkpoint-all peak), runs ``chain-dp`` (exact),
``griewank`` (the classical baseline) and, where the graph is small enough, ``milp-plain``
(Checkmate's MILP as published: cold start, HiGHS's own bound) with a time limit; each method
proves its own bound (cached bounds are dropped before each). ``dags``: ``milp`` (HiGHS)
against ``cpsat`` (the same model on CP-SAT) on small U-Nets, random DAGs and chains, at
budgets above the exact smallest one. ``sweep``: chain-dp's persistent recursion (in C: the one
whose states are kept per chain; no bound) over a sweep of budgets of each chain (``SWEEP``,
from the largest down), cold (the kept states dropped before each budget) and warm (kept
across the sweep, as in a user's sweep), down and up; ``--time-limit`` per budget.
``strided``: on heterogeneous chains, the persistent recursion with checkpoints only at every
fourth or second layer (``chain_dp.strides``: twice that per 512 layers beyond; chain-dp's
fallback) against the whole one, each
cold, at 0, 10 and 30% of the budget range (costs as multiples of the total cost);
``--time-limit`` per solve.
Rows (graph, budget, method) go to CSV and JSON as they come: solve time, cost, proven bound,
gap, and the time ratio to the reference method. Timings are wall clock on a shared machine:
noisy.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

import remat
from remat.schedule.budget import checkpoint_all_peak
from remat.solvers import SolveOptions, solver
from remat.solvers.chain_dp import _OutOfTime, chain_of, forget_states, persistent_cost

sys.path.insert(0, str(Path(__file__).parent))
# "no schedule" where nothing is proven; each method cold; Checkmate's MILP as published
from bench_bounds import measured, plain_milp, status_of  # noqa: E402

FRACTIONS = (0.0, 0.1, 0.3, 0.6)
SWEEP = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05, 0.0)
"""``sweep``'s fractions of the budget range, from the largest down (an overhead curve)."""


def budgets(graph) -> list[tuple[float, float]]:
    """(fraction, bytes) from the exact smallest budget (fraction 0) to the full peak (1)."""
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    peak = checkpoint_all_peak(graph)
    return [(f, least + f * (peak - least)) for f in FRACTIONS]


def row(graph_name, n, unit, fraction, budget, sol, wall, method=None) -> dict:
    return dict(graph=graph_name, n=n, unit=unit, T=2 * n + 1, budget_fraction=fraction,
                budget_bytes=budget, method=method or sol.method, status=status_of(sol),
                cost=sol.compute_cost if sol.feasible else None,
                lower_bound=sol.lower_bound if sol.feasible else None,
                gap=sol.gap, solve_time=round(wall, 4))


def run_chains(sizes, milp_max_n, milp_limit, stem, log=sys.stderr) -> list[dict]:
    rows: list[dict] = []
    have_milp = "milp" in remat.METHODS
    for n in sizes:
        for unit in (True, False):
            graph = remat.graphs.linear(n, unit=unit)
            name = f"linear{n}{'-unit' if unit else ''}"
            for fraction, budget in budgets(graph):
                methods = ["chain-dp", "griewank"]
                if have_milp and n <= milp_max_n:
                    methods.append("milp-plain")
                for method in methods:
                    start = time.perf_counter()
                    sol = run_one(method, graph, budget, milp_limit)
                    rows.append(row(name, n, unit, fraction, budget, sol,
                                    time.perf_counter() - start, method))
                    report(rows, stem, "chain-dp", log)
    return rows


def run_sweep(sizes, limit, stem, log=sys.stderr) -> list[dict]:
    rows: list[dict] = []
    for n in sizes:
        for unit in (True, False):
            graph = remat.graphs.linear(n, unit=unit)
            name, chain = f"linear{n}{'-unit' if unit else ''}", chain_of(graph)
            least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
            peak = checkpoint_all_peak(graph)
            for mode in ("cold", "warm down", "warm up"):
                forget_states()
                for fraction in SWEEP[::-1] if mode == "warm up" else SWEEP:
                    budget = least + fraction * (peak - least)
                    if mode == "cold":
                        forget_states()
                    start = time.perf_counter()
                    try:
                        cost = persistent_cost(chain, budget - graph.static_mem, start + limit)[0]
                        status = "persistent optimum"
                    except _OutOfTime:
                        cost, status = None, "timeout"
                    wall = time.perf_counter() - start
                    rows.append(dict(graph=name, n=n, unit=unit, T=graph.size,
                                     budget_fraction=fraction, budget_bytes=budget,
                                     method=f"persistent {mode}", status=status, cost=cost,
                                     lower_bound=None, gap=None, solve_time=round(wall, 4)))
                    report(rows, stem, "persistent cold", log)
    return rows


def run_strided(sizes, limit, stem, log=sys.stderr) -> list[dict]:
    from remat.solvers import chain_dp

    rows: list[dict] = []
    for n in sizes:
        graph = remat.graphs.linear(n)
        name, chain = f"linear{n}", chain_of(graph)
        tables = chain_dp._ChainDP(chain, extended=False)
        least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
        peak = checkpoint_all_peak(graph)
        for fraction in (0.0, 0.1, 0.3):
            budget = least + fraction * (peak - least)
            free = chain_dp.usable(chain, budget - graph.static_mem)
            for stride in chain_dp.strides(n) + (1,):
                forget_states()
                start = time.perf_counter()
                try:
                    if stride == 1:
                        cost, status = persistent_cost(chain, free, start + limit)[0], "optimum"
                    else:
                        found = chain_dp._strided(tables, chain_dp._strided_state(tables, stride),
                                                  free, time.perf_counter() + limit, stride)
                        cost = None if found is None else found[0]
                        status = "no schedule" if found is None else "schedule"
                except _OutOfTime:
                    cost, status = None, "timeout"
                wall = time.perf_counter() - start
                if stride != 1 and cost is None and wall >= limit:
                    status = "timeout"
                method = "persistent whole" if stride == 1 else f"persistent stride {stride}"
                rows.append(dict(graph=name, n=n, unit=False, T=graph.size,
                                 budget_fraction=fraction, budget_bytes=budget, method=method,
                                 status=status,
                                 cost=None if cost is None else cost / graph.total_cost,
                                 lower_bound=None, gap=None, solve_time=round(wall, 4)))
                report(rows, stem, "persistent whole", log)
    forget_states()
    return rows


def run_one(method, graph, budget, limit):
    """One method's solution; each proves its own bound (the graph's cached bounds are
    dropped first, and chain-dp's kept recursions). chain-dp: the limit bounds its search of
    the full class (then it keeps the best persistent schedule, details["optimal_in_class"]
    false). milp-plain: Checkmate's MILP as published (cold start, HiGHS's own bound only),
    as in bench_bounds.py."""
    if method == "milp-plain":
        return measured(method, graph, lambda: plain_milp(graph, budget, limit))[1]
    options = SolveOptions(time_limit=None if method == "griewank" else limit)
    return measured(method, graph, lambda: solver(method)(graph, budget, options))[1]


DAGS = {
    "chain8-unit": lambda: remat.graphs.linear(8, unit=True),
    "chain16-unit": lambda: remat.graphs.linear(16, unit=True),
    "unet2-unit": lambda: remat.graphs.unet(2, unit=True),
    "unet3": lambda: remat.graphs.unet(3),
    "dag12-s2-unit": lambda: remat.graphs.random_dag(12, seed=2, unit=True),
    "dag20-s3": lambda: remat.graphs.random_dag(20, seed=3),
    "dag30-s4": lambda: remat.graphs.random_dag(30, seed=4),
}


def run_dags(limit, stem, log=sys.stderr) -> list[dict]:
    from remat.solvers.min_budget import min_budget

    rows: list[dict] = []
    for name, make in DAGS.items():
        graph = make()
        least = min_budget(graph, SolveOptions(time_limit=limit)).peak_memory
        peak = checkpoint_all_peak(graph)
        for fraction in (0.1, 0.4):
            budget = least + fraction * (peak - least)
            for method in ("milp", "cpsat"):
                start = time.perf_counter()
                sol = solver(method)(graph, budget, SolveOptions(time_limit=limit))
                n = len(graph.forward_nodes) - 1
                rows.append(row(name, n, None, fraction, budget, sol, time.perf_counter() - start))
                rows[-1]["T"] = graph.size
                report(rows, stem, "milp", log)
    return rows


def report(rows: list[dict], stem: str, reference: str, log) -> None:
    """Log the newest row, add time ratios, rewrite the result files (a cut-short run keeps
    what it measured)."""
    r = rows[-1]
    print(f"{r['graph']:<16} f={r['budget_fraction']:<4} {r['method']:<9} {r['status']:<10} "
          f"cost={r['cost']} bound={r['lower_bound']} {r['solve_time']:.3f}s", file=log, flush=True)
    add_ratios(rows, reference)
    write(rows, stem, "python bench/bench_fast.py " + " ".join(sys.argv[1:]))


def add_ratios(rows: list[dict], reference: str) -> None:
    """Each row gets time_vs_ref = its solve time / the reference method's on the same graph
    and budget."""
    ref = {(r["graph"], r["budget_fraction"]): r["solve_time"] for r in rows
           if r["method"] == reference}
    for r in rows:
        base = ref.get((r["graph"], r["budget_fraction"]))
        r["time_vs_ref"] = round(r["solve_time"] / base, 2) if base else None


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
    p.add_argument("suite", choices=("chains", "dags", "sweep", "strided"))
    p.add_argument("--sizes", default="8,16,32,64,128,256")
    p.add_argument("--milp-max-n", type=int, default=16)
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per milp/cpsat solve")
    p.add_argument("-o", "--output", default=None)
    args = p.parse_args(argv)
    stem = args.output or f"bench/results/fast_{args.suite}"
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.suite == "chains":
        run_chains(sizes, args.milp_max_n, args.time_limit, stem)
    elif args.suite == "sweep":
        run_sweep(sizes, args.time_limit, stem)
    elif args.suite == "strided":
        run_strided(sizes, args.time_limit, stem)
    else:
        run_dags(args.time_limit, stem)
    print(f"wrote {stem}.csv and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
