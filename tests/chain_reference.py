"""The recursion of remat/solvers/chain_dp.py written the plain way, for tests: exact budgets
as memo keys, every choice tried, no shortcuts, no bounds, no shared segments, no persistent
pass.

Layers 0..n-1 plus a virtual layer n whose backward node is the loss (a_n: size 0, cost 0;
g_n = L; nothing above it). seg(s, t, top, M): stages b_t..b_s from base a_{s-1} (held by
the caller, counted in M). drop(u, t, top, m, e, M): stages b_t..b_m (m > u) from base
a_{u-1}, which is freed after its last read; ends with g_m and a_{m-1} iff e.
"""
from __future__ import annotations

import sys
from functools import lru_cache

INF = float("inf")


class Ref:
    def __init__(self, chain):
        n = chain.n
        self.n = n + 1  # with the virtual loss layer
        self.fc = list(chain.fwd_cost) + [0.0]
        self.fm = list(chain.fwd_mem) + [0.0]
        self.fw = list(chain.fwd_ws) + [0.0]
        self.bc = list(chain.bwd_cost) + [chain.loss_cost]
        self.g = list(chain.grad_mem) + [0.0]  # g[k] output of b_k; g[n] = L; g[n+1] = 0
        self.bw = list(chain.bwd_ws) + [chain.loss_ws]
        self.seg = lru_cache(maxsize=None)(self._seg)
        self.drop = lru_cache(maxsize=None)(self._drop)

    def base(self, s):
        return self.fm[s - 1] if s else 0.0

    def sweep(self, s, j, held, dropped_base):
        """(cost, peak) computing a_s..a_j from base a_{s-1} with ``held`` resident (base
        included); the base freed after a_s if ``dropped_base``."""
        cost, peak = 0.0, -INF
        for i in range(s, j + 1):
            inp = self.fm[i - 1] if i > s else 0.0
            extra = -self.base(s) if dropped_base and i > s else 0.0
            peak = max(peak, held + extra + inp + self.fm[i] + self.fw[i])
            cost += self.fc[i]
        return cost, peak

    def single(self, t, top, held):
        """Stage b_t from base a_{t-1} with ``held`` (base, g_{t+1}, a_t if top)."""
        cost, peak = self.bc[t], -INF
        if not top:
            peak = held + self.fm[t] + self.fw[t]
            cost += self.fc[t]
        a_t = 0.0 if top else self.fm[t]
        peak = max(peak, held + a_t + self.g[t] + self.bw[t])
        return cost, peak

    def _seg(self, s, t, top, M):
        b = self.base(s)
        held = b + self.g[t + 1] + (self.fm[t] if top else 0.0)
        best = (INF, None)
        if s == t:
            cost, peak = self.single(t, top, held)
            return (cost, ("single",)) if peak <= M else best
        for j in range(s, t):
            sc, sp = self.sweep(s, j, held, False)
            if sp > M:
                break
            for e in (1, 0):
                uc = self.seg(j + 1, t, top, M - b)[0]
                rc = self.seg(s, j, e, M)[0]
                if sc + uc + rc < best[0]:
                    best = (sc + uc + rc, ("up", j, e))
                for mp in range(j + 2, t + 1):
                    uc = self.drop(j + 1, t, top, mp, e, M - b)[0]
                    rc = self.seg(s, mp - 1, e, M)[0]
                    if sc + uc + rc < best[0]:
                        best = (sc + uc + rc, ("drop", j, mp, e))
        return best

    def _drop(self, u, t, top, m, e, M):
        b = self.base(u)
        held = b + self.g[t + 1] + (self.fm[t] if top else 0.0)
        best = (INF, None)
        for j in range(u, t):
            for mp in range(max(j + 1, m), t + 1):
                for e2 in (1, 0):
                    if mp == m and e2 != e:
                        continue
                    early = mp == m  # nothing below reads the base again
                    sc, sp = self.sweep(u, j, held, early)
                    if sp > M:
                        continue
                    upM = M if early else M - b
                    if mp == j + 1:
                        uc = self.seg(j + 1, t, top, upM)[0]
                    else:
                        uc = self.drop(j + 1, t, top, mp, e2, upM)[0]
                    rc = 0.0 if early else self.drop(u, mp - 1, e2, m, e, M)[0]
                    if sc + uc + rc < best[0]:
                        best = (sc + uc + rc, ("x", j, mp, e2))
        return best

    # reconstruction: list of (t, node) forward computations serving stage b_t
    def ops_seg(self, s, t, top, M, out):
        choice = self.seg(s, t, top, M)[1]
        b = self.base(s)
        if choice[0] == "single":
            if not top:
                out.append((t, t))
            return
        j = choice[1]
        out += [(t, i) for i in range(s, j + 1)]
        if choice[0] == "up":
            self.ops_seg(j + 1, t, top, M - b, out)
            self.ops_seg(s, j, choice[2], M, out)
        else:
            _, j, mp, e = choice
            self.ops_drop(j + 1, t, top, mp, e, M - b, out)
            self.ops_seg(s, mp - 1, e, M, out)

    def ops_drop(self, u, t, top, m, e, M, out):
        _, j, mp, e2 = self.drop(u, t, top, m, e, M)[1]
        b = self.base(u)
        early = mp == m
        out += [(t, i) for i in range(u, j + 1)]
        upM = M if early else M - b
        if mp == j + 1:
            self.ops_seg(j + 1, t, top, upM, out)
        else:
            self.ops_drop(j + 1, t, top, mp, e2, upM, out)
        if not early:
            self.ops_drop(u, mp - 1, e2, m, e, M, out)


def solve_ref(graph, budget):
    """(cost, R) or (inf, None)."""
    import numpy as np
    from remat.solvers.chain_dp import chain_of
    sys.setrecursionlimit(100000)
    chain = chain_of(graph)
    ref = Ref(chain)
    M = float(budget) - graph.static_mem
    n = chain.n
    cost = ref.seg(0, n, 0, M)[0]
    if cost == INF:
        return INF, None
    ops = []
    ref.ops_seg(0, n, 0, M, ops)
    R = np.eye(graph.size, dtype=bool)
    for t, i in ops:
        if i == n:
            continue  # virtual a_n
        stage = i if t == n else 2 * n - t
        R[stage, i] = True
    return cost, R
