"""Benchmark: certified gaps on zoo models and large random graphs, against Checkmate's MILP.

    PYTHONPATH=. python bench/bench_bounds.py [--graphs zoo,random] [--budgets 40%,60%,80%]
        [--time-limit 60] [--plain-max-nodes 130] [--methods auto,...] [--order trace]
        [--seeds 0] [-o bench/results/bounds]
    PYTHONPATH=. python bench/bench_bounds.py --graphs chains [-o bench/results/bounds_chains]

Graphs: the tiny zoo captured at module and op granularity with FLOP costs (bench/graphs/,
made by ``remat capture NAME --tiny --cost-model flops --granularity G -o ...`` before the
capture ordered nodes for memory: in autograd's order, ``--order trace``; ``--order memory``
reorders each file by ``remat.graph.order.lower_order``, the rule capture now applies; the
files are older captures, so their sizes differ somewhat from a capture made today), a
12-layer GPT-2 of the tiny width at op level (``gpt2_12-op``, 679 nodes, made by the command
in bench/deep_models.py) and
``remat.graphs.random_dag(n)`` for n = 100, 250, 500 (T = 201 to 1001). For every graph and
budget it runs:

- ``bound``: the retention bound alone (remat/solvers/bounds.py), its value and time;
- ``milp-plain``: Checkmate's MILP as published: cold start, HiGHS's own bound only (graphs up
  to --plain-max-nodes nodes; beyond, its model takes minutes just to build);
- ``retention``: the heuristic built on the bound's knapsack;
- ``best-classic``: the cheapest of the classic baselines (checkpoint-all, Chen, AP, griewank);
- ``cp-intervals``: retention intervals on CP-SAT, from the best baseline (retention's schedule
  with half the limit, ``milp.warm_start``), with the retention bound;
- ``auto``: what ``remat.solve`` does by default, with the same time limit.

Each method proves its own bound within its own limit (cached bounds are dropped before each).

``--graphs chains``: for ``linear(n)``, n = 8..128 (``--chain-sizes``), unit and
heterogeneous, at fractions 0, 0.1, 0.3, 0.6 of the way from chain-dp's smallest budget (past
``chain_dp.LEAST_PEAK_LAYERS`` layers: one node's operands, ``peak_lower_bound``, which it
equals on linear(1024) and heterogeneous linear(2048)) to the full peak: chain-dp's cost (or
each of ``--chain-methods``) against the bound it proves (equal: the schedule is optimal over
all schedules).

Each row: cost and bound as multiples of the graph's total cost (1.0 = no recomputation), the
certified gap (cost / bound - 1), the wall time and the seed. Timings are wall clock on a
shared 2-core machine: noisy. Rows go to CSV/JSON as they come; a PNG plots gap against graph
size.

``--seeds 0,1,2`` runs every row once per seed (``SolveOptions.seed``: retention's search,
CP-SAT's, HiGHS's; ``bound`` and ``best-classic`` do not take one: each seed reruns the
same call; ``--graphs chains`` rows run once, with no seed). At 60 s a row's
cost can move by 5% from one run to the next, where a deadline cuts a search (gpt2_12-op
30%, auto, seed 0: 1.1630 and 1.1117 in two runs; bench/results/fast_notes.md, session 35):
to compare two versions of the code, run both with the same seeds and compare them with
``bench/compare_bounds.py``, which counts a row only where the ranges over the runs part.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import remat
from remat.graph.order import ORDERS, lower_order, reordered
from remat.solvers import SolveOptions, interrupt, solver
from remat.solvers.base import CLASSIC
from remat.solvers.bounds import forget_bounds, retention_bound
from remat.solvers.chain_dp import forget_states
from remat.solvers.milp import best_baseline, solve_with
from remat.solvers.milp_model import TIGHT

GRAPH_DIR = Path(__file__).parent / "graphs"
RANDOM_SIZES = (100, 250, 500)


def graphs(kinds: list[str], order: str = "trace"):
    """(name, graph) pairs, smallest first. ``order="memory"``: each zoo graph (captured in
    autograd's order) reordered by ``lower_order``, the rule ``remat.capture`` now applies."""
    found = []
    if "zoo" in kinds:
        for path in sorted(GRAPH_DIR.glob("*.json")):
            graph = remat.RematGraph.from_json(path)
            better = lower_order(graph) if order == "memory" else None
            found.append((path.stem, graph if better is None else reordered(graph, better)))
    if "random" in kinds:
        found += [(f"random_dag{n}", remat.graphs.random_dag(n, seed=0)) for n in RANDOM_SIZES]
    return sorted(found, key=lambda item: item[1].size)


def measured(label, graph, run):
    """(label, Solution or None, wall seconds). The bounds cached for ``graph`` are dropped
    first, so each method's time includes proving its own bound, and chain-dp's kept
    recursions, so each call starts cold."""
    forget_bounds(graph)
    forget_states()
    began = time.perf_counter()
    sol = run()
    return label, sol, time.perf_counter() - began


def plain_milp(graph, budget, limit, seed=0):
    """Checkmate's MILP as published: cold start, HiGHS's own bound only."""
    return solve_with(graph, budget, SolveOptions(time_limit=limit, warm_start=False,
                                                  seed=seed), TIGHT, retention=False)


def chain_rows(limit, sizes=(8, 16, 32, 64, 128), methods=("chain-dp",)):
    """``methods`` (chain-dp, auto) against their proven bounds on linear chains."""
    from remat.schedule.budget import checkpoint_all_peak
    from remat.solvers.bounds import peak_lower_bound
    from remat.solvers.chain_dp import LEAST_PEAK_LAYERS

    for n in sizes:
        for unit in (True, False):
            graph = remat.graphs.linear(n, unit=unit)
            least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget \
                if n <= LEAST_PEAK_LAYERS else peak_lower_bound(graph)
            if interrupt.requested():  # Ctrl-C (main's scope): no least peak, no rows
                return
            for fraction in (0.0, 0.1, 0.3, 0.6):
                budget = least + fraction * (checkpoint_all_peak(graph) - least)
                for method in methods:
                    _, sol, wall = measured(method, graph, lambda: solver(method)(
                        graph, budget, SolveOptions(time_limit=limit)))
                    yield dict(graph=f"linear{n}{'-unit' if unit else ''}", T=graph.size,
                               budget=f"f={fraction}", method=method, status=status_of(sol),
                               cost=_rel(sol.compute_cost, graph.total_cost),
                               bound=_rel(sol.lower_bound, graph.total_cost),
                               gap=sol.compute_cost / sol.lower_bound - 1,
                               seconds=round(wall, 3), chosen=sol.details.get("chosen"))
                    if interrupt.requested():
                        return


ROWS = ("bound", "milp-plain", "retention", "best-classic", "cp-intervals", "auto")


def rows_for(name, graph, percent, limit, plain_max, methods=ROWS, seed=0):
    budget = remat.parse_budget(percent, graph)
    options = SolveOptions(time_limit=limit, seed=seed)
    total = graph.total_cost
    out, runs = [], []
    if "bound" in methods:
        began = time.perf_counter()
        bound = retention_bound(graph, budget, time_limit=limit)
        out.append(dict(graph=name, T=graph.size, budget=percent, method="bound",
                        status=bound.status, cost=None, bound=_rel(bound.value, total), gap=None,
                        seconds=round(time.perf_counter() - began, 3), seed=seed))
    if "milp-plain" in methods and graph.size <= plain_max:
        runs.append(measured("milp-plain", graph, lambda: plain_milp(graph, budget, limit,
                                                                      seed)))
    if "retention" in methods:
        runs.append(measured("retention", graph, lambda: solver("retention")(
            graph, budget, options)))
    if "best-classic" in methods:
        runs.append(measured("best-classic", graph,
                             lambda: best_baseline(graph, budget, CLASSIC)))
    if "cp-intervals" in methods:
        runs.append(measured("cp-intervals", graph, lambda: solver("cp-intervals")(
            graph, budget, options)))
    if "auto" in methods:
        runs.append(measured("auto", graph, lambda: solver("auto")(graph, budget, options)))
    for label, sol, wall in runs:
        feasible = sol is not None and sol.feasible
        lower = sol.lower_bound if feasible and label != "best-classic" else None
        out.append(dict(graph=name, T=graph.size, budget=percent, method=label,
                        status=status_of(sol),
                        cost=_rel(sol.compute_cost, total) if feasible else None,
                        bound=_rel(lower, total) if lower is not None else None,
                        gap=(sol.compute_cost / lower - 1) if lower else None,
                        seconds=round(wall, 3),
                        chosen=sol.details.get("chosen") if feasible else None, seed=seed))
    return out


def status_of(sol):
    """The solver's status, except "no schedule" where it found none and did not prove that
    none exists (``Solution.proven_infeasible``)."""
    if sol is None or (not sol.feasible and not sol.proven_infeasible):
        return "no schedule"
    return sol.status


def _rel(value, total):
    return None if value is None or not math.isfinite(value) else round(value / total, 6)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    markers = (("milp-plain", "x"), ("auto", "o"), ("retention", "^"), ("chain-dp", "s"))
    for method, marker in markers:
        pts = [(r["T"], max(r["gap"], 1e-5)) for r in rows
               if r["method"] == method and r["gap"] is not None]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=method, alpha=0.7)
    ax.axhline(0.01, color="grey", linestyle="--", linewidth=1, label="1% gap")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes T")
    ax.set_ylabel("cost / proven bound - 1\n(1e-5: proven optimal)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="zoo,random")
    parser.add_argument("--budgets", default="40%,60%,80%")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--plain-max-nodes", type=int, default=130)
    parser.add_argument("--only", default=None, help="comma-separated graph names")
    parser.add_argument("--chain-sizes", default="8,16,32,64,128",
                        help="--graphs chains: layers of each linear(n)")
    parser.add_argument("--chain-methods", default="chain-dp",
                        help="--graphs chains: comma-separated methods (chain-dp, auto)")
    parser.add_argument("--methods", default=",".join(ROWS),
                        help="comma-separated rows to run for each zoo or random graph")
    parser.add_argument("--order", default="trace", choices=ORDERS,
                        help="memory: the zoo graphs reordered by the rule capture now applies")
    parser.add_argument("--seeds", default="0",
                        help="comma-separated seeds: every row runs once per seed")
    parser.add_argument("-o", "--output", default="bench/results/bounds")
    args = parser.parse_args(argv)
    selected = graphs(args.graphs.split(","), args.order)
    if args.only:
        keep = set(args.only.split(","))
        selected = [item for item in selected if item[0] in keep]
    rows: list[dict] = []
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with interrupt.catching():  # Ctrl-C: stop after the row it cuts short
        if "chains" in args.graphs.split(","):
            sizes = tuple(int(n) for n in args.chain_sizes.split(","))
            for row in chain_rows(args.time_limit, sizes, tuple(args.chain_methods.split(","))):
                rows.append(row)
                print(json.dumps(row), flush=True)
            write(rows, args)
        seeds = [int(s) for s in args.seeds.split(",")]
        for name, graph, percent, seed in ((n, g, p, s) for n, g in selected
                                           for p in args.budgets.split(",") for s in seeds):
            if interrupt.requested():
                break
            for row in rows_for(name, graph, percent, args.time_limit, args.plain_max_nodes,
                                tuple(args.methods.split(",")), seed):
                rows.append(row)
                print(json.dumps(row), flush=True)
            write(rows, args)
        if interrupt.requested():
            print("interrupted: the sweep stops here", file=sys.stderr, flush=True)
    plot(rows, args.output + ".png")


def write(rows, args) -> None:
    fields = ["graph", "T", "budget", "method", "status", "cost", "bound", "gap", "seconds",
              "chosen", "seed"]
    with open(args.output + ".csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    meta = dict(command="PYTHONPATH=. python " + " ".join(sys.argv),
                python=platform.python_version(), machine=platform.machine(),
                cpus=os.cpu_count(), when=time.strftime("%Y-%m-%d %H:%M"))
    with open(args.output + ".json", "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
