"""Check the retention bound against milp's proven optima on random graphs.

    PYTHONPATH=. python bench/verify_bounds.py [--seeds 6] [--time-limit 20]
        [-o bench/results/verify_bounds.log]

For random_dag(n), n = 5..10 (T = 11..21), heterogeneous and unit, and budgets 50..90% of the
checkpoint-all range: milp (without the retention bound, so its proof is HiGHS's own) and the
retention bound. A bound above a proven optimum would be a bug; the log counts them, and how
often the bound equals the optimum. Cases where milp does not prove optimality are skipped.
"""
from __future__ import annotations

import argparse
import sys

import remat
from remat.solvers import SolveOptions
from remat.solvers.bounds import retention_bound
from remat.solvers.milp import solve_with
from remat.solvers.milp_model import TIGHT


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("-o", "--output", default="bench/results/verify_bounds.log")
    args = parser.parse_args(argv)
    counts = {"checked": 0, "tight": 0, "above": 0, "skipped": 0}
    with open(args.output, "w") as log:
        log.write("command: PYTHONPATH=. python " + " ".join(sys.argv) + "\n")
        for n in range(5, 11):
            for seed in range(args.seeds):
                for unit in (False, True):
                    graph = remat.graphs.random_dag(n, seed=seed, unit=unit)
                    for percent in ("50%", "60%", "70%", "80%", "90%"):
                        line = check(graph, percent, args.time_limit, counts)
                        line = f"random_dag({n}, seed={seed}, unit={unit}) {percent}: {line}"
                        print(line, flush=True)
                        log.write(line + "\n")
        summary = (f"checked {counts['checked']} proven optima: bound equal in {counts['tight']}, "
                   f"above (a bug) in {counts['above']}; skipped {counts['skipped']} "
                   f"(infeasible or not proven)")
        print(summary)
        log.write(summary + "\n")
    return 1 if counts["above"] else 0


def check(graph, percent, limit, counts) -> str:
    budget = remat.parse_budget(percent, graph)
    sol = solve_with(graph, budget, SolveOptions(time_limit=limit), TIGHT, retention=False)
    if sol.status != "optimal":
        counts["skipped"] += 1
        return f"milp {sol.status}: skipped"
    bound = retention_bound(graph, budget).value
    counts["checked"] += 1
    counts["tight"] += bound >= sol.compute_cost * (1 - 1e-7)
    above = bound > sol.compute_cost * (1 + 1e-7)
    counts["above"] += above
    return (f"optimum {sol.compute_cost:.6g}, bound {bound:.6g}"
            + ("  BOUND ABOVE THE OPTIMUM" if above else ""))


if __name__ == "__main__":
    sys.exit(main())
