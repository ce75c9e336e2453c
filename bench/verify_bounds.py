"""Check the retention bound against milp's proven optima on random graphs.

    PYTHONPATH=. python bench/verify_bounds.py [--seeds 6] [--time-limit 20]
        [-o bench/results/verify_bounds.log]

For random_dag(n), n = 5..10 (T = 11..21), heterogeneous and unit, and op_chain(n), n = 4..10
(the op-level shape where the per-stage rebuild rows bind), at budgets 50..90% of the
checkpoint-all range, and linear(n), n = 3..8, from chain-dp's smallest budget up (where the
moment model binds): milp (without the retention bound, so its proof is HiGHS's own) and the
retention bound, without and with milp's cost as ``enough`` (which runs the recompute rows).
A bound above a proven optimum would be a bug; the log counts them, and how often the bound
equals the optimum. Cases where milp does not prove optimality are skipped.
"""
from __future__ import annotations

import argparse
import sys

import remat
from remat.schedule.budget import checkpoint_all_peak
from remat.solvers import SolveOptions, solver
from remat.solvers.bounds import peak_lower_bound, retention_bound
from remat.solvers.milp import solve_with
from remat.solvers.milp_model import TIGHT


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("-o", "--output", default="bench/results/verify_bounds.log")
    args = parser.parse_args(argv)
    counts = {"checked": 0, "tight": 0, "above": 0, "skipped": 0, "staged": 0, "chained": 0,
              "moment": 0, "recompute": 0}
    with open(args.output, "w") as log:
        log.write("command: PYTHONPATH=. python " + " ".join(sys.argv) + "\n")
        for label, graph, budgets in _graphs(args.seeds):
            for name, budget in budgets:
                line = f"{label} {name}: {check(graph, budget, args.time_limit, counts)}"
                print(line, flush=True)
                log.write(line + "\n")
        summary = (f"checked {counts['checked']} proven optima: bound equal in "
                   f"{counts['tight']}, above (a bug) in {counts['above']}, raised by the "
                   f"per-stage rows in {counts['staged']}, by the chained rows in "
                   f"{counts['chained']}, by the moment model in {counts['moment']}, by the "
                   f"recompute rows in {counts['recompute']}; skipped "
                   f"{counts['skipped']} (infeasible or not proven)")
        print(summary)
        log.write(summary + "\n")
    return 1 if counts["above"] else 0


def _graphs(seeds: int):
    """(label, graph, budgets): random_dag at 50..90% of the checkpoint-all budget; op_chain,
    whose least peak is close to that, at fractions of the way from the operands' floor
    (``peak_lower_bound``) up to it."""
    percents = ("50%", "60%", "70%", "80%", "90%")
    for n in range(5, 11):
        for seed in range(seeds):
            for unit in (False, True):
                graph = remat.graphs.random_dag(n, seed=seed, unit=unit)
                yield (f"random_dag({n}, seed={seed}, unit={unit})", graph,
                       [(p, remat.parse_budget(p, graph)) for p in percents])
    for n in range(4, 11, 2):
        for seed in range(seeds):
            graph = remat.graphs.op_chain(n, seed=seed)
            low, high = peak_lower_bound(graph), checkpoint_all_peak(graph)
            yield (f"op_chain({n}, seed={seed})", graph,
                   [(f"floor+{f:.0%}", low + f * (high - low)) for f in (0.2, 0.4, 0.6, 0.8)])
    for n in (3, 4, 5, 6, 8):  # chains: where the moment model charges a cascade of rebuilds
        for unit in (False, True):
            graph = remat.graphs.linear(n, unit=unit)
            low = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
            high = checkpoint_all_peak(graph)
            yield (f"linear({n}, unit={unit})", graph,
                   [(f"least+{f:.0%}", low + f * (high - low)) for f in (0.0, 0.1, 0.2, 0.4)])


def check(graph, budget, limit, counts) -> str:
    sol = solve_with(graph, budget, SolveOptions(time_limit=limit), TIGHT, retention=False)
    if sol.status != "optimal":
        counts["skipped"] += 1
        return f"milp {sol.status}: skipped"
    alone = retention_bound(graph, budget).value  # no schedule to meet: no recompute rows
    bound = retention_bound(graph, budget, enough=sol.compute_cost).value
    gap_models = retention_bound(graph, budget, models=("first", "staged", "chained")).value
    unchained = retention_bound(graph, budget, models=("first", "staged")).value
    first_rows = retention_bound(graph, budget, models=("first",)).value
    counts["staged"] += unchained > first_rows * (1 + 1e-7)
    counts["chained"] += gap_models > unchained * (1 + 1e-7)
    counts["moment"] += alone > gap_models * (1 + 1e-7)
    counts["recompute"] += bound > alone * (1 + 1e-7)
    counts["checked"] += 1
    counts["tight"] += bound >= sol.compute_cost * (1 - 1e-7)
    above = bound > sol.compute_cost * (1 + 1e-7)
    counts["above"] += above
    return (f"optimum {sol.compute_cost:.6g}, bound {bound:.6g}"
            + ("  BOUND ABOVE THE OPTIMUM" if above else ""))


if __name__ == "__main__":
    sys.exit(main())
