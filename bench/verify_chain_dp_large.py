"""chain-dp against milp on a few longer random chains (n = 8..12), where milp may prove the
optimum within its time limit.

    PYTHONPATH=. python bench/verify_chain_dp_large.py [TIME_LIMIT]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from remat.schedule.budget import checkpoint_all_peak  # noqa: E402
from remat.solvers import SolveOptions, solver  # noqa: E402
from test_fast_solvers import random_chain  # noqa: E402

CASES = [(8, 100), (8, 101), (10, 102), (12, 103)]


def main(limit: float) -> None:
    counts = {"proven": 0, "equal": 0, "above": 0, "below_bound": 0}
    for n, seed in CASES:
        graph = random_chain(n, seed)
        least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
        peak = checkpoint_all_peak(graph)
        for f in (0.0, 0.25):
            budget = least + f * (peak - least)
            dp = solver("chain-dp")(graph, budget, SolveOptions())
            ref = solver("milp")(graph, budget, SolveOptions(time_limit=limit))
            line = (f"n={n} seed={seed} f={f} budget={budget}: chain-dp {dp.compute_cost} "
                    f"({dp.solve_time:.2f}s); milp {ref.status} {ref.compute_cost} bound "
                    f"{ref.lower_bound} ({ref.solve_time:.1f}s)")
            print(line, flush=True)
            if dp.compute_cost < ref.lower_bound - 1e-6:
                counts["below_bound"] += 1
            if ref.status == "optimal":
                counts["proven"] += 1
                key = "equal" if abs(dp.compute_cost - ref.compute_cost) < 1e-6 else "above"
                counts[key] += 1
    print(counts)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
