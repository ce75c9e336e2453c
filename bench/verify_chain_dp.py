"""How often is chain-dp (best persistent schedule) above the true optimum? Checked with milp.

    PYTHONPATH=. python bench/verify_chain_dp.py [SEEDS]   (default 3)
    PYTHONPATH=. python bench/verify_chain_dp.py --show N SEED   (one chain at the DP's
        smallest budget: both schedules stage by stage, to see what the DP lacks)

Random heterogeneous chains (tests/test_fast_solvers.random_chain, seeds 100..) with n = 4, 5, 6
layers; budgets at fractions 0, 0.25, 0.5 of the range from the DP's smallest budget to the
checkpoint-all peak, plus just below the DP's smallest budget (milp must find nothing there
either, else the DP's minimum is too high). Prints every disagreement and a summary line.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from remat.schedule import simulate  # noqa: E402
from remat.schedule.budget import checkpoint_all_peak  # noqa: E402
from remat.solvers import SolveOptions, solver  # noqa: E402
from test_fast_solvers import random_chain  # noqa: E402


def check(graph, budget, label) -> tuple[int, int]:
    """(1, 1 if the DP is above milp's proven optimum) for one budget."""
    dp = solver("chain-dp")(graph, budget, SolveOptions())
    ref = solver("milp")(graph, budget, SolveOptions(time_limit=20.0))
    if ref.status != "optimal":
        print(f"{label}: milp {ref.status}, bound {ref.lower_bound}, DP {dp.compute_cost}")
        return 1, 0
    if dp.compute_cost > ref.compute_cost + 1e-6:
        gap = dp.compute_cost / ref.compute_cost - 1
        print(f"{label}: DP {dp.compute_cost} > milp optimum {ref.compute_cost} (+{gap:.1%})")
        return 1, 1
    return 1, 0


def main(seeds: int) -> None:
    checked = above = 0
    for n in (4, 5, 6):
        for seed in range(100, 100 + seeds):
            graph = random_chain(n, seed)
            least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
            peak = checkpoint_all_peak(graph)
            for f in (0.0, 0.25, 0.5):
                c, a = check(graph, least + f * (peak - least), f"n={n} seed={seed} f={f}")
                checked, above = checked + c, above + a
            below = solver("milp")(graph, least - 0.5, SolveOptions(time_limit=20.0))
            checked += 1
            if below.feasible:
                above += 1
                print(f"n={n} seed={seed}: milp fits {below.peak_memory} below the DP's minimum {least}")
    print(f"checked {checked}, DP above the optimum (or its minimum too high) in {above}")


def show(graph, sol) -> None:
    """Print ``sol`` stage by stage: +name computes, -name frees, [bytes in use after]."""
    sim = simulate(graph, sol.R, sol.S)
    print(f"{sol.method}: {sol.status}, cost {sol.compute_cost}, peak {sim.peak_memory}")
    stage = None
    for e in sim.timeline:
        if e.stage != stage:
            stage = e.stage
            print(f"\n  stage {stage:>2} ({graph.names[stage]}):", end="")
        print(f" {'+' if e.action == 'compute' else '-'}{graph.names[e.node]}[{e.memory:g}]", end="")
    print("\n")


def show_case(n: int, seed: int) -> None:
    graph = random_chain(n, seed)
    print(f"random_chain({n}, seed={seed}): cost {graph.cost.tolist()}, mem {graph.mem.tolist()}, "
          f"static {graph.static_mem}")
    least = solver("chain-dp")(graph, 0.0, SolveOptions()).min_budget
    print(f"budget = the DP's smallest: {least}")
    show(graph, solver("chain-dp")(graph, least, SolveOptions()))
    show(graph, solver("milp")(graph, least, SolveOptions(time_limit=30.0)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--show":
        show_case(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
