"""One-off: the reference extended chain recursion (tests/chain_reference.py) or chain-dp against
tests/exhaustive.py's search over every S, at every whole budget from its smallest peak to
the checkpoint-all peak, on random chains with and without workspace.

    PYTHONPATH=. python bench/check_chain_exact.py N SEEDS [ref|dp]
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
import exhaustive  # noqa: E402
from chain_reference import solve_ref  # noqa: E402
from test_fast_solvers import random_chain  # noqa: E402

from remat.schedule import checkpoint_all_peak, simulate  # noqa: E402
from remat.schedule.rs import s_from_r  # noqa: E402
from remat.solvers import SolveOptions, solver  # noqa: E402


def frontier(graph):
    """Every (t, S[t], S[t+1]) stage priced once; then a shortest path per budget."""
    cache = {}
    orig = exhaustive._stage

    def stage(g, t, cur, fol):
        key = (t, cur.tobytes(), fol.tobytes())
        if key not in cache:
            cache[key] = orig(g, t, cur, fol)
        return cache[key]
    exhaustive._stage = stage
    try:
        least = exhaustive.min_peak(graph)
        out = {}
        for b in range(int(math.ceil(least)), int(checkpoint_all_peak(graph)) + 1):
            out[b] = exhaustive.optimal_cost(graph, float(b))
        out[least - 0.5] = exhaustive.optimal_cost(graph, least - 0.5)
        return out
    finally:
        exhaustive._stage = orig


def mine(graph, b, how):
    if how == "ref":
        cost, R = solve_ref(graph, b)
        if R is not None:
            sim = simulate(graph, R, s_from_r(graph, R))
            assert sim.peak_memory <= b + 1e-9 and abs(sim.compute_cost - cost) < 1e-9, (b, cost, sim)
        return cost
    sol = solver("chain-dp")(graph, b, SolveOptions(time_limit=1.0))
    return sol.compute_cost if sol.feasible else math.inf


def main(n, seeds, how):
    checked = above = below = 0
    for seed in range(seeds):
        for ws in (False, True):
            g = random_chain(n, seed)
            if ws:
                rng = np.random.default_rng(1000 + seed)
                g = g.with_workspace(rng.integers(0, 6, g.size).astype(float) * (rng.random(g.size) < 0.5))
            for b, cost in frontier(g).items():
                got = mine(g, b, how)
                checked += 1
                if got > cost + 1e-9:
                    above += 1
                    print(f"n={n} seed={seed} ws={ws} budget={b}: {how} {got} > exhaustive {cost}")
                elif got < cost - 1e-9:
                    below += 1
                    print(f"n={n} seed={seed} ws={ws} budget={b}: {how} {got} < exhaustive {cost} (BUG)")
    print(f"n={n} seeds={seeds} {how}: checked {checked}, above {above}, below {below}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "ref")
