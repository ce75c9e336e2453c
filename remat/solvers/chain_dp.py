"""``chain-dp``: the optimal schedule of a linear chain by dynamic programming (Rotor-style,
extended with non-persistent checkpoints), in C: milliseconds to seconds up to n = 128-256.

The chain (``remat.graphs.linear``) has forward nodes f_0..f_{n-1}, the loss L, and backward
nodes b_k reading g_{k+1} (the gradient from above, L for k = n-1), a_{k-1} and a_k (a_i is the
output of f_i). Under DESIGN.md's memory rule a value lives from its computation to its last
read (or to a later stage that keeps it), so a schedule is a sequence of computations and its
peak is the largest ``static + live values + the output being computed (+ workspace)``.
Internally the loss is one more layer n (a_n of size 0 and cost 0, b_n = the loss node, whose
output g_n = L is the gradient above b_{n-1}): the forward pass is then the sweep of stage b_n
and a stored value may be dropped across the loss like across any other stage.

The recursion follows Herrmann et al. 2019 ("Optimal checkpointing for heterogeneous chains",
Rotor) adapted to this graph, where one value a_k is both the checkpoint and the tape of layer
k, and adds the move Rotor lacks. Budgets count everything a state holds (its base, the
gradient above, a_t if ``top``), never what outer states hold. Three kinds of state:

- ``seg(s, t, top)``: backward stages b_t..b_s when, at the start of stage b_t, a_{s-1} (the
  base, kept by the caller) and g_{t+1} are resident, a_t is resident iff ``top``, nothing
  else of a_s..a_t is. It is a first block ``held(s, t, top, m', e')`` (stages b_t..b_{m'})
  then ``seg(s, m'-1, e')``.
- ``held(s, t, top, m, e)``: stages b_t..b_m, base kept: the sweep of b_t runs from the base
  and stores a_j first (j < m); the part above, from base a_j, is ``seg(j+1, t, top)`` if
  m = j + 1 (a_j then stays iff e: the persistent move), else ``drop(j+1, t, top, m, e)``.
- ``drop(u, t, top, m, e)``: stages b_t..b_m (m > u) from base a_{u-1}, which is freed right
  after its last read, ending with a_{m-1} resident iff e. Either the sweep of b_t stores a_j
  first and nothing below reads the base again (freed after computing a_u; the part above is
  seg or drop from a_j ending at b_m), or a first block ``held(u, t, top, m', e')``, m' > m,
  then ``drop(u, m'-1, e', m, e)``.

So a checkpoint a_j may stay until its last backward reader (persistent, Rotor's class) or be
freed after its last read in some stage b_m, m > j + 1, the stages below rebuilding it from a
lower checkpoint when needed: the move of the former counterexamples (``random_chain(5, 100)``
at budget 29: 43, the persistent recursion 52; ``linear(16)`` at 37748736 bytes: 76.313
against 77.698; ``bench/verify_chain_dp.py --show 5 100`` prints milp's schedule).

Exactness. The DP is exact over the schedules these recursions describe (every choice is
tried; the shortcuts below are exact). That this class holds an optimum of every chain is NOT
proven; it is measured: equal to ``tests/exhaustive.py`` (every S matrix) at every whole
budget on random chains n = 2, 3, 4 with and without workspace (20, 40 and 30 seeds: 83, 326
and 536 budgets), equal to milp's proven optimum on all 96 checks of ``bench/verify_chain_dp.py
8`` (n = 4..6) and on 8 chains n = 8..12 (``bench/verify_chain_dp_large.py``). Schedules it
cannot produce: recomputing a backward node, more than one forward sweep in a stage (building
checkpoints below the one a stage sweeps from), and a part above handing more than a_{m-1} to
the stages below. So the method keeps the retention bound (``remat.solvers.bounds``) as its
``lower_bound`` and says "optimal" only where its cost meets it, otherwise "timeout" if
the time limit cut the search or the bound short, else "feasible";
``details["optimal_in_class"]`` is True when the search of the full class finished (see
below), False when the time limit stopped it and the best persistent schedule stands.

On unit chains (``linear(n, unit=True)``) the least cost equals Griewank's binomial optimum
with s = B - 3 snapshot slots, ``total + forward_steps(n, s) - (n - 1)``
(``remat.solvers.griewank``), at every whole budget B from the smallest to the store-all
peak: n = 8, 16, 32 with the full class and 64, 128 with the persistent recursion alone
(measured; tests/test_fast_solvers.py checks n <= 32). That optimum is proven for the classic
checkpointing model; that every schedule of ours maps onto one of that model with s = B - 3
slots is not proven here, so it certifies nothing, and the retention bound stays the
bound (it proves no unit chain at 10% of the range for n >= 32 in 30 s).

Lifting (a bound used to prune). Take any schedule of a held or drop block over layers u..t
ending at b_m, of peak P and cost C. Removing every computation of a_u..a_{m-1} and keeping
a_{m-1} resident throughout gives a schedule of ``seg(m, t, top)`` (by induction over the
recursion: each block whose first checkpoint is at or above m-1 keeps its shape with base
a_{m-1}; each below it is replaced by its transform), of peak at most P + size(a_{m-1}) (P -
size(base) + size(a_{m-1}) for a held block) and cost at most C - fwd(u..m-1), since the
sweep of b_t computes each of a_u..a_{m-1} at least once. So ``fwd(u..m-1) + seg(m, t, top)``
at the lifted budget bounds the block from below (``_lifted``); where the persistent choice
meets it, no drop choice is searched.

Costs and sizes are exact (no memory discretization). Speed: each state's answer is kept as
budget intervals found by bisection (the least cost is a step function of the budget), the
search is branch and bound (a caller passes the most it could use; a search that proves it
cannot meet that stops and records a lower bound), the schedule of the nearest solved budget
below is the incumbent to beat, and segments with equal content share their states. Both
recursions run in C where ``setup.py`` built ``_chain_dp_c.c`` (the same recursions, float
for float; ``_Compiled``; else in Python). The persistent recursion runs first:
heterogeneous linear(n) at 0-60% of the budget range takes 0.03-0.06 s at n = 128, 0.13-0.7
s at 192, 0.8-2.5 s at 256 and 3-18 s at 384, unit chains 0.01-0.24 s up to 384 layers (in
Python: ~2 s at 128 heterogeneous, 12-38 s at 192). The full class is then searched only for
something strictly cheaper, a search that is mostly a proof and is bounded by
``SolveOptions.time_limit``: in C, unit linear(64) at 10% of the range 0.06 s (Python 5.2
s), heterogeneous linear(128) at 10% 2.2 s and at its least peak 4.2 s (Python: past 30 s),
linear(192) at 10% 16 s (bench/results/fast_notes.md, session 16). The persistent recursion
gets all but ``FALLBACK_SHARE`` of the limit; where it does not finish (heterogeneous chains
of several hundred layers), ``solve`` returns the cheapest persistent schedule that fits of
these, status "timeout": the one of least peak (``least_peak_tables``, in C: 0.2 s at 512
layers; numpy: 0.1 s at 192 layers, 0.9 s at 384), the strided recursions' (in C, checkpoints
only at every fourth or second layer, ``STRIDES``) and the recursion's on a budget grid
(``_Graded``, numpy, O(n^3) per grid level: 0.5-0.8 s with 16 levels at 192 layers, 5-8 s at
384), on as many levels as the time left allows (heterogeneous linear(192) at its least
peak: 1.33 of the total cost, the least-peak schedule 1.90); where the caller has a schedule
already (``SolveOptions.initial``), the recursion gets the whole limit. On heterogeneous chains
of more than 512 layers, and on every chain of more than ``LEAST_PEAK_LAYERS``, a call with a
time limit runs only the least-peak and strided fallbacks (``strided_only``: the whole
recursion is not done in 60 s at 1024 layers; no budget grid, none finished there), past
``LEAST_PEAK_LAYERS`` only the strided ones. ``solve`` skips
the search of the full class where the retention bound already meets the persistent cost, and
gives what is left of the limit to the bound where it does not meet the final cost.

The persistent C recursion keeps its interval stores per chain (``_STATES``; every fact in
them holds at every budget), so a later call on the same chain, at any budget, starts from
every search finished before, including those of a call that ran out of time. It pays
most from the smallest budget up: on heterogeneous linear(384), after its two smallest
budgets (10.5 and 12.1 s), 8 more up to 90% of the range take 0.004-0.30 s each (cold:
0.3-20.0 s); the same sweep from the top down gains 7-19% (two runs; ``python
bench/bench_fast.py sweep``, bench/results/fast_sweep.csv). ``Ahead`` runs that recursion in a
thread (the C code releases the GIL) while the caller does other work, and chain-dp's own
call on the chain waits for it: auto so gives it a second core beside retention.

A node's transient workspace (``RematGraph.workspace``) is added to its own candidate: in the
sweeps, in ``need``/``own`` (each backward node's own operands) and in ``store_peak``, exactly
as the simulator counts it.
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import time
import weakref
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from remat.errors import RematError, UnsupportedGraphError
from remat.graph.core import RematGraph
from remat.schedule.rs import s_from_r
from remat.schedule.solution import Solution
from remat.solvers import interrupt
from remat.solvers.base import NO_SCHEDULE_YET, SolveOptions, past
from remat.solvers.bounds import bound_time, forcing_time, meets, retention_bound

try:  # the recursions in C (setup.py builds them); else the Python ones below
    from remat.solvers import _chain_dp_c
except ImportError:
    _chain_dp_c = None
COMPILED = _chain_dp_c is not None
"""Whether the recursions run in C (``auto`` sizes chain-dp's share by it)."""

INF = float("inf")
FALLBACK_SHARE = 0.25
"""The share of its time limit ``solve`` keeps from the persistent recursion for
``_fallback``, used only if the recursion does not finish in the rest. Nothing is kept where
the caller already has a schedule (``SolveOptions.initial``: ``auto``'s best so far): the
recursion then gets the whole limit, the fallback only its least-peak schedule (0.2 s at 512
layers), and a later call on the same chain resumes the recursion (``_Compiled``)."""
GRADED_LEVELS = 16
"""The first grid of ``_fallback``'s graded DP (doubled while time remains)."""
STRIDES = (4, 2)
"""The strided persistent recursions (``_strided_state``: checkpoints at every fourth, then
every second layer) that ``Ahead`` and ``_fallback`` run where the whole recursion does not
finish: heterogeneous linear(512) at 10% of its budget range, 1.2154 / 1.2031 of the total
cost in 0.9 / 6.3 s, where the whole recursion is not done in 60 s (1.1850 in 66 s, session
17); auto returned chen-sqrtn's 1.3142 there before. Where nothing strided fits (a chain's
least peak) they fail in 0.5 / 4.9 s (``python bench/bench_fast.py strided``,
bench/results/fast_strided.csv)."""
STRIDED_SHARE = 1 / 3
"""The share of ``Ahead``'s time its strided recursions may use (all of it on chains where
they are all chain-dp runs, ``strided_only``)."""
STRIDED_LAYERS = 512
"""Chains of up to this many layers take ``STRIDES``; longer ones the same strides times
``n // STRIDED_LAYERS`` (``strides``), as many places for a checkpoint as at this length."""
WHOLE_LAYERS = (512, 4)
"""(layers, kinds): on longer chains with more kinds of layer than this (``layer_kinds``), a
call with a time limit never starts the whole persistent recursion (``strided_only``; without a
limit it runs to the end): heterogeneous linear(1024) (525821 segments) at 10% and 30% of its
budget range was not done in 60 s (a 30 s chain-dp call, 22 s of it in that recursion, peaked at
539 MB of process memory); its stride 4 found 1.2149 of the total cost at 10% in 10.5 s, where
chen-greedy's 1.2671 was auto's best (``python bench/bench_fast.py strided --sizes 1024``). Unit
chains (one kind) keep it up to ``LEAST_PEAK_LAYERS``: 7.2 s at 10% of linear(1024, unit)."""
LEAST_PEAK_LAYERS = 1024
"""On longer chains chain-dp builds no least-peak persistent schedule (``least_peak_tables``
are O(n^3), in C 0.21 s at 512 layers, 2.3 s at 1024, 29 s at 2048), and a call with a time
limit runs only the strided recursions (``strided_only``), whatever its kinds of layer: on
linear(2048, unit), at 10% of checkpoint-all's peak, a 30 s call took 60 s and returned the
least-peak schedule (512 times the total cost), at 30% its whole recursion was not done in 30
s (its fallback: stride 16, 1.3503), where strides 16 and 8 alone found 1.4503 and 1.3503 in
0.4 and 0.1 s; at 60% they found its optimum, 1.2001, in 0.2 s, the whole recursion in 19.9
s."""
_SLACK = 1e-12


@dataclass(frozen=True)
class Chain:
    """The sizes and costs of a chain training graph, by layer."""

    n: int
    fwd_cost: tuple[float, ...]
    fwd_mem: tuple[float, ...]
    bwd_cost: tuple[float, ...]
    grad_mem: tuple[float, ...]  # grad_mem[k]: size of g_k (output of b_k); grad_mem[n]: loss
    loss_cost: float
    fwd_ws: tuple[float, ...]  # transient workspace of f_k, of b_k, of the loss
    bwd_ws: tuple[float, ...]
    loss_ws: float


def applies(graph: RematGraph) -> bool:
    """True when ``chain-dp`` can solve ``graph`` (``auto`` and method lists can ask first)."""
    try:
        chain_of(graph)
    except UnsupportedGraphError:
        return False
    return True


def chain_of(graph: RematGraph) -> Chain:
    """The chain view of ``graph``; raises UnsupportedGraphError if it is not a linear chain
    training step (f_0..f_{n-1}, loss, b_{n-1}..b_0 with b_k reading g_{k+1}, a_{k-1}, a_k)."""
    n = len(graph.forward_nodes) - 1
    if n < 1 or not graph.is_chain or graph.size != 2 * n + 1:
        raise UnsupportedGraphError(
            "chain-dp handles linear chains only (remat.graphs.linear shape: n layers, a loss, n "
            "mirrored backward nodes); use milp, cpsat or auto for this graph")
    for k in range(n):
        node = 2 * n - k
        above = n if k == n - 1 else 2 * n - k - 1
        want = tuple(sorted({above, k} | ({k - 1} if k else set())))
        if graph.deps[node] != want or not graph.is_backward[node]:
            raise UnsupportedGraphError(
                f"chain-dp: {graph.describe(node)} should read nodes {list(want)} (gradient from "
                f"above, layer input, layer output) but reads {list(graph.deps[node])}; use milp")
    cost, mem, ws = graph.cost, graph.mem, graph.workspace
    return Chain(n=n, fwd_cost=tuple(map(float, cost[:n])), fwd_mem=tuple(map(float, mem[:n])),
                 bwd_cost=tuple(float(cost[2 * n - k]) for k in range(n)),
                 grad_mem=tuple(float(mem[2 * n - k]) for k in range(n)) + (float(mem[n]),),
                 loss_cost=float(cost[n]), fwd_ws=tuple(map(float, ws[:n])),
                 bwd_ws=tuple(float(ws[2 * n - k]) for k in range(n)), loss_ws=float(ws[n]))


class _Tables(NamedTuple):
    """A chain's budget-independent tables (``_ChainDP._tables``), each indexed [s, t] (and
    ``store_peak`` [top, s, t]) over the n + 1 layers."""

    need: np.ndarray
    store_peak: np.ndarray
    own: np.ndarray
    segment_id: np.ndarray


TABLES_KEPT = 4
"""How many chains' budget-independent tables (``need``, ``store_peak``, ``own``,
``segment_id``, as arrays and as the Python recursion's lists, the C recursion's copy of
them, the least-peak tables) stay cached: auto
builds a chain's DP up to four times (segment count, least-peak schedule, persistent
recursion, full class)."""
_TABLES: dict[Chain, "_Tables"] = {}
_LISTS: dict[Chain, "_Tables"] = {}
_PACKED: dict[Chain, tuple] = {}
_LEAST_TABLES: dict[tuple[Chain, bool], tuple] = {}
_STATES: dict[Chain, object] = {}
"""The persistent C recursions kept, by chain: their stores answer later budgets of the same
chain (``_Compiled``)."""


def _kept(cache: dict, key, make):
    """``cache[key]``, made by ``make()`` on a miss; the oldest goes past ``TABLES_KEPT``."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= TABLES_KEPT:
            cache.pop(next(iter(cache)))
        found = cache[key] = make()
    return found


def forget_states() -> None:
    """Drop the kept C recursions (benchmarks: each call then starts cold)."""
    _STATES.clear()


class _ChainDP:
    """Memoised branch-and-bound recursion over the states of the module docstring (``seg``:
    (s, t, top); ``drop``: (u, t, top, m, e)), each state's value function stored as
    intervals of budget.

    The least cost of a state is a non-increasing step function of its budget M. When the
    recursion finds the optimum at M with a schedule whose own peak is P <= M, every budget in
    [P, M] has that optimum and that schedule (more memory never costs more; the schedule
    fits). So a state keeps the intervals it has solved, and a budget inside one is answered by
    bisection: the number of solves per state is about the number of steps of its function,
    not the number of distinct budgets the recursion asks about (sums of checkpoint sizes).
    Ties in cost go to the smaller peak, so intervals start low. Searches cut short by a
    caller's cutoff leave facts "the cost is at least v up to budget B" (``_Steps.above``),
    which, with the cost of the next interval up, answer later cutoffs without a search.

    ``extended`` False: the persistent recursion only (no held blocks with a drop above,
    no drop states), Rotor's class; ``complete`` says whether answers are optimal over the
    full class (set by ``search_below`` when a persistent answer is proven so).

    Exact shortcuts keep the state count down: a ``seg`` state whose budget covers the peak
    of storing every value (``store_peak``) costs exactly one computation per node (the least
    any schedule can pay); a state whose budget is below ``need`` (some backward node's own
    operands do not fit) is infeasible; and states are keyed by the *content* of their
    segment (``segment_id``: base size, every layer's costs and sizes, the gradient above),
    so the repeated layers of a uniform or block-repetitive chain share one solution.

    Internally the chain has n + 1 layers: layer n is the loss (a_n: size 0, cost 0; its
    backward node b_n is the loss node, whose output g_n = L is the gradient above b_{n-1}).
    So the forward pass is the sweep of stage b_n and nothing about the loss is special.
    """

    def __init__(self, chain: Chain, extended: bool = True, deadline: float | None = None):
        self.c = chain
        self.extended = extended
        self.deadline = deadline  # time.perf_counter() value; _OutOfTime past it
        self.complete = extended  # its answers are optimal over the full class
        n = self.n = chain.n + 1
        self.mem = chain.fwd_mem + (0.0,)
        self.fcost = chain.fwd_cost + (0.0,)
        self.fws = chain.fwd_ws + (0.0,)
        self.grad = chain.grad_mem + (0.0,)  # grad[k]: output of b_k; grad[n]: nothing above
        self.bcost = chain.bwd_cost + (chain.loss_cost,)
        self.bws = chain.bwd_ws + (chain.loss_ws,)
        self.memo: dict[tuple, _Steps] = {}
        self.cells_by_key: dict[tuple, _Steps] = {}  # held and drop states
        self.solves = 0
        self.sweeps: dict[tuple, tuple] = {}
        self.fp = _prefix(self.fcost)
        self.bp = _prefix(self.bcost)
        self.base = [0.0] + list(self.mem[:n - 1])  # base[s]: size of a_{s-1}
        # numpy, O(n^2): 0.15 s at 1024 layers, 2.3 s at 4096 (in Python loops: 4.5 s at
        # 2048, 26 s at 4096); read-only, so shared by the chain's DPs
        self.arrays = _kept(_TABLES, chain, self._tables)

    def _tables(self) -> "_Tables":
        """What does not depend on the budget (``_Tables``)."""
        need, store_peak = _range_tables(self)
        # own[m, t]: the largest of b_m..b_t's own candidates (need without a held base)
        own = np.full_like(need, -INF)
        diagonal = need.diagonal()
        for m in range(self.n):
            own[m, m:] = np.maximum.accumulate(diagonal[m:])
        return _Tables(need, store_peak, own, _segment_ids(self))

    # What only the Python recursion reads, made on first use (the C one never does).
    @functools.cached_property
    def cells(self) -> list[list[list]]:
        """Its seg stores by position: 2 n^2 slots, 270 MB at 4096 layers."""
        return [[[None] * self.n for _ in range(self.n)] for _ in (0, 1)]

    @functools.cached_property
    def _lists(self) -> _Tables:
        """``arrays`` as nested lists (scalar reads are faster on lists), kept per chain."""
        return _kept(_LISTS, self.c, lambda: _Tables(*(a.tolist() for a in self.arrays)))

    @functools.cached_property
    def need(self) -> list[list[float]]:
        return self._lists.need

    @functools.cached_property
    def store_peak(self) -> list[list[list[float]]]:
        return self._lists.store_peak

    @functools.cached_property
    def own(self) -> list[list[float]]:
        return self._lists.own

    @functools.cached_property
    def segment_id(self) -> list[list[int]]:
        return self._lists.segment_id

    def store_cost(self, s: int, t: int, top: int) -> float:
        """Cost of stages b_t..b_s when every value is stored: each node once."""
        return self.fp[t + 1 - top] - self.fp[s] + self.bp[t + 1] - self.bp[s]

    def best(self, s: int, t: int, top: int, budget: float,
             cutoff: float = INF) -> tuple[float, float]:
        """(least cost, peak of the schedule that reaches it) of state seg(s, t, top) within
        ``budget`` (see the module docstring). Branch and bound: when the least cost is above
        ``cutoff`` (the caller has no use for a dearer answer) the search may stop once it
        proves that, and returns (a lower bound above the cutoff, inf). (inf, inf): nothing
        fits."""
        if budget < self.need[s][t]:
            return INF, INF
        if budget >= self.store_peak[top][s][t]:
            return self.store_cost(s, t, top), self.store_peak[top][s][t]
        steps = self.cells[top][s][t] or self.steps(s, t, top)
        return self._lookup(steps, budget, cutoff, self._split, (s, t, top))

    def held(self, s: int, t: int, top: int, m: int, e: int, budget: float,
             cutoff: float = INF) -> tuple[float, float]:
        """``best`` for state held(s, t, top, m, e): stages b_t..b_m (m > s) from base a_{s-1},
        which stays, the sweep of b_t storing one first checkpoint a_j (j < m) and the part
        above it ending at b_m with a_{m-1} resident iff ``e``."""
        return self._state(("h", s, t, top, m, e), self._split_held, budget, cutoff)

    def drop(self, u: int, t: int, top: int, m: int, e: int, budget: float,
             cutoff: float = INF) -> tuple[float, float]:
        """``best`` for state drop(u, t, top, m, e): stages b_t..b_m (m > u) from base
        a_{u-1}, freed after its last read, ending with a_{m-1} resident iff ``e``."""
        if budget < self.own[m][t]:
            return INF, INF
        return self._state(("d", u, t, top, m, e), self._split_drop, budget, cutoff)

    def _state(self, key: tuple, split, budget: float, cutoff: float):
        steps = self.cells_by_key.get(key)
        if steps is None:
            kind, s, t, top, m, e = key
            content = (kind, self.segment_id[s][t], top, m - s, e)
            steps = self.cells_by_key[key] = self.memo.setdefault(content, _Steps())
        return self._lookup(steps, budget, cutoff, split, key[1:])

    def _lookup(self, steps: "_Steps", budget: float, cutoff: float, split, state):
        """The interval store's answer at ``budget``, solving (``split``) on a miss."""
        i = bisect_right(steps.low, budget) - 1
        if i < 0 or budget > steps.high[i]:
            known = steps.bound(budget, i)
            if known > cutoff or known == INF:  # (inf: proven infeasible)
                return known, INF
            # the schedule of the interval below fits too: the answer unless beaten
            below = (steps.cost[i], steps.low[i], steps.choice[i]) if i >= 0 else (INF, INF, None)
            if i >= 0 and below[0] <= known:  # and nothing can beat it
                steps.high[i] = budget
                return steps.answer(i)
            self.solves += 1
            if not self.solves & 1023 and past(self.deadline):  # or Ctrl-C
                raise _OutOfTime
            cost, peak, choice = split(*state, budget, cutoff, below)
            if choice is None and cutoff < INF:
                steps.add_bound(budget, cost)
                return cost, INF
            i = steps.add(budget, cost, peak, choice)
        return steps.answer(i)

    def steps(self, s: int, t: int, top: int) -> "_Steps":
        """The interval store of state seg(s, t, top), shared by every segment with its
        content."""
        steps = self.memo.setdefault((self.segment_id[s][t], top), _Steps())
        self.cells[top][s][t] = steps
        return steps

    def _sweep(self, s: int, t: int, top: int):
        """The forward sweep of stage b_t from base a_{s-1} through each j = s..t-1: (cost
        through a_j, peak with the base held, peak with the base freed after computing a_s),
        one list entry per j (cached: it does not depend on the budget)."""
        key = (s, t, top)
        found = self.sweeps.get(key)
        if found:
            return found
        mem, fws, fc = self.mem, self.fws, self.fcost
        base = self.base[s]
        extra = base + self.grad[t + 1] + (mem[t] if top else 0.0)
        costs, held, freed = [], [], []
        cost, peak = 0.0, extra + mem[s] + fws[s]  # a_s: the base is still there
        early = peak
        for j in range(s, t):
            if j > s:
                pair = mem[j - 1] + mem[j] + fws[j]
                peak, early = max(peak, extra + pair), max(early, extra - base + pair)
            cost += fc[j]
            costs.append(cost)
            held.append(peak)
            freed.append(early)
        self.sweeps[key] = found = (costs, held, freed)
        return found

    def _split(self, s: int, t: int, top: int, budget: float, cutoff: float, incumbent):
        """seg(s, t, top): the first block held(s, t, top, m', e') (stages b_t..b_{m'}), then
        seg(s, m'-1, e'). Returns (cost, peak, (m' - s, e')) of the cheapest, the lower peak
        among equal costs, or (a lower bound, inf, None) if none costs at most ``cutoff``.
        ``incumbent``: (cost, peak, choice) of a schedule known to fit, returned unless
        something beats it. Every node of the segment runs once and a_s..a_{m'-1-e'} run
        again below the block: ``floor + forward cost of s..m'-1-e'`` bounds a choice from
        below and grows with m', so the loop stops once it passes the best total found."""
        fp, bp = self.fp, self.bp
        floor = fp[t + 1 - top] - fp[s] + bp[t + 1] - bp[s]
        block_least = fp[t + 1 - top] - fp[s] + bp[t + 1]  # less bp[m']
        run = _Search(cutoff, incumbent)
        self._persistent_pass(s, t, top, budget, floor, run)
        if not self.extended:
            return run.result()
        for mp in range(s + 1, t + 1):
            if run.stop(floor + fp[mp - 1] - fp[s]):
                break
            for e in (1, 0):
                if run.stop(floor + fp[mp - e] - fp[s]):
                    continue
                rest, rest_peak = self.best(s, mp - 1, e, budget, run.best - block_least + bp[mp])
                if run.missed(block_least - bp[mp] + rest, rest_peak):
                    continue
                if run.stop(self._lifted(s, t, top, mp, budget - self.base[s], run.best - rest)
                            + rest):
                    continue
                block, block_peak = self.held(s, t, top, mp, e, budget, run.best - rest)
                if not run.missed(block + rest, block_peak):
                    run.offer(block + rest, max(block_peak, rest_peak), (mp - s, e, True))
        return run.result()

    def _persistent_pass(self, s: int, t: int, top: int, budget: float, floor: float,
                         run: "_Search") -> None:
        """The choices of ``_split`` whose first block stores a_{m'-1} and keeps it to b_{m'}
        (the persistent recursion), tried first: a good incumbent early makes the cutoffs of
        the full pass tight."""
        fp, bp, base = self.fp, self.bp, self.base[s]
        costs, held, _ = self._sweep(s, t, top)
        for k, (run_cost, run_peak) in enumerate(zip(costs, held)):
            j = s + k
            if run_peak > budget or run.stop(floor + fp[j] - fp[s]):
                break
            rest_least = fp[j] - fp[s] + bp[j + 1] - bp[s]
            upper, up_peak = self.best(j + 1, t, top, budget - base,
                                       run.best - run_cost - rest_least)
            upper += run_cost
            if run.missed(upper + rest_least, up_peak):
                continue
            for keep in (1, 0):
                low_cost, low_peak = self.best(s, j, keep, budget, run.best - upper)
                if not run.missed(upper + low_cost, low_peak):
                    run.offer(upper + low_cost, max(run_peak, base + up_peak, low_peak),
                              (k + 1, keep, False))

    def _split_held(self, s: int, t: int, top: int, m: int, e: int, budget: float,
                    cutoff: float, incumbent):
        """held(s, t, top, m, e): the sweep of b_t stores a_j first (j < m); the part above
        it is seg(j+1, t, top) if m = j + 1 (then a_j stays iff e), else drop(j+1, t, top, m,
        e). Choice: (j - s,)."""
        base = self.base[s]
        costs, held, _ = self._sweep(s, t, top)
        run = _Search(cutoff, incumbent)
        up_budget = budget - base
        least = self._lifted(s, t, top, m, up_budget, run.best)
        if run.stop(least):
            return run.result()
        for k in reversed(range(m - s)):  # j = m - 1 (the persistent choice) first
            if held[k] > budget:
                continue
            j = s + k
            upper, up_peak = self._above(j, t, top, m, e, up_budget, run.best - costs[k])
            if not run.missed(costs[k] + upper, up_peak):
                run.offer(costs[k] + upper, max(held[k], base + up_peak), (k,))
            if run.settled(least):
                break
        return run.result()

    def _above(self, j: int, t: int, top: int, m: int, e: int, budget: float,
               cutoff: float):
        """The part above a stored a_j: seg(j+1, t, top) when j + 1 = m, else
        drop(j+1, t, top, m, e)."""
        if m == j + 1:
            return self.best(j + 1, t, top, budget, cutoff)
        return self.drop(j + 1, t, top, m, e, budget, cutoff)

    def _lifted(self, u: int, t: int, top: int, m: int, budget: float, cutoff: float) -> float:
        """A lower bound on every held or drop block over layers u..t ending at b_m within
        ``budget`` (for held blocks: less their base): fwd(u..m-1) + seg(m, t, top) at
        ``budget + size of a_{m-1}`` (module docstring, "Lifting"). Above ``cutoff`` it may
        stop early with a weaker bound that is still above it."""
        fwd = self.fp[m] - self.fp[u]
        return fwd + self.best(m, t, top, budget + self.mem[m - 1], cutoff - fwd)[0]

    def _split_drop(self, u: int, t: int, top: int, m: int, e: int, budget: float,
                    cutoff: float, incumbent):
        """drop(u, t, top, m, e): either the sweep of b_t stores a_j first (j < m) and
        nothing below reads the base again, so it is freed right after the sweep computes
        a_u, the part above being seg(j+1, t, top) (m = j + 1) or drop(j+1, t, top, m, e);
        choice (0, j - u). Or a first block held(u, t, top, m', e'), m' > m, then
        drop(u, m'-1, e', m, e); choice (1, m' - u, e')."""
        fp, bp = self.fp, self.bp
        costs, _, freed = self._sweep(u, t, top)
        floor = fp[t + 1 - top] - fp[u] + bp[t + 1] - bp[m]  # every node once
        run = _Search(cutoff, incumbent)
        least = max(floor, self._lifted(u, t, top, m, budget, run.best))
        if run.stop(least):
            return run.result()
        for k in reversed(range(m - u)):
            if freed[k] > budget:
                continue
            j = u + k
            upper, up_peak = self._above(j, t, top, m, e, budget, run.best - costs[k])
            if not run.missed(costs[k] + upper, up_peak):
                run.offer(costs[k] + upper, max(freed[k], up_peak), (0, k))
            if run.settled(least):
                return run.result()
        block_least = fp[t + 1 - top] - fp[u] + bp[t + 1]  # less bp[m']
        base = self.base[u]
        for mp in range(m + 1, t + 1):
            if run.stop(floor + fp[mp - 1] - fp[u]):
                break
            # the first block's lifted bound, shared by both e' (cut by the least rest)
            block_lift = self._lifted(u, t, top, mp, budget - base,
                                      run.best - (fp[mp - 1] - fp[u] + bp[mp] - bp[m]))
            for e2 in (1, 0):
                if run.stop(floor + fp[mp - e2] - fp[u]):
                    continue
                rest_least = self._lifted(u, mp - 1, e2, m, budget, run.best - block_lift)
                if run.stop(block_lift + rest_least):
                    continue
                rest, rest_peak = self.drop(u, mp - 1, e2, m, e, budget,
                                            run.best - block_least + bp[mp])
                if run.missed(block_least - bp[mp] + rest, rest_peak):
                    continue
                block, block_peak = self.held(u, t, top, mp, e2, budget, run.best - rest)
                if not run.missed(block + rest, block_peak):
                    run.offer(block + rest, max(block_peak, rest_peak), (1, mp - u, e2))
        return run.result()

    # ----- schedule reconstruction -------------------------------------------------------
    def stage_of(self, t: int, node: int) -> int:
        """Stage of a forward computation in the sweep that serves b_t (the forward pass for
        b_n, the loss; stage b_t otherwise)."""
        n = self.c.n
        return node if t == n else 2 * n - t

    def _sweep_ops(self, t: int, first: int, last: int, ops: list) -> None:
        ops += [(self.stage_of(t, i), i) for i in range(first, last + 1) if i < self.c.n]

    def _choice(self, key: tuple, budget: float):
        steps = self.cells_by_key[key]
        return steps.choice[steps.find(budget)]

    def recomputed(self, s: int, t: int, top: int, budget: float, ops: list) -> None:
        """Append the (stage, node) forward computations of ``best(s, t, top, budget)``."""
        if budget >= self.store_peak[top][s][t]:
            self._sweep_ops(t, s, t - top, ops)
            return
        self.best(s, t, top, budget)  # solved already unless float rounding moved the budget
        steps = self.steps(s, t, top)
        dm, e, block = steps.choice[steps.find(budget)]
        if block:
            self.recomputed_held(s, t, top, s + dm, e, budget, ops)
        else:  # the persistent choice: a_{m'-1} stored first, the part above is a segment
            self._sweep_ops(t, s, s + dm - 1, ops)
            self.recomputed(s + dm, t, top, budget - self.base[s], ops)
        self.recomputed(s, s + dm - 1, e, budget, ops)

    def recomputed_held(self, s: int, t: int, top: int, m: int, e: int, budget: float,
                        ops: list) -> None:
        self.held(s, t, top, m, e, budget)
        j = s + self._choice(("h", s, t, top, m, e), budget)[0]
        self._sweep_ops(t, s, j, ops)
        if m == j + 1:
            self.recomputed(j + 1, t, top, budget - self.base[s], ops)
        else:
            self.recomputed_drop(j + 1, t, top, m, e, budget - self.base[s], ops)

    def recomputed_drop(self, u: int, t: int, top: int, m: int, e: int, budget: float,
                        ops: list) -> None:
        self.drop(u, t, top, m, e, budget)
        choice = self._choice(("d", u, t, top, m, e), budget)
        if choice[0] == 0:
            j = u + choice[1]
            self._sweep_ops(t, u, j, ops)
            if m == j + 1:
                self.recomputed(j + 1, t, top, budget, ops)
            else:
                self.recomputed_drop(j + 1, t, top, m, e, budget, ops)
        else:
            mp, e2 = u + choice[1], choice[2]
            self.recomputed_held(u, t, top, mp, e2, budget, ops)
            self.recomputed_drop(u, mp - 1, e2, m, e, budget, ops)

    def schedule_ops(self, budget: float) -> list[tuple[int, int]]:
        """The (stage, node) forward recomputations of the root's schedule at ``budget``."""
        ops: list[tuple[int, int]] = []
        limit = _deep_recursion(self.c)
        try:
            self.recomputed(0, self.n - 1, 0, budget, ops)
        finally:
            sys.setrecursionlimit(limit)
        return ops

    def min_peak(self, whole: bool, solve=None) -> float:
        """The smallest peak above static memory of any schedule in the DP's class (equal to
        exhaustive search wherever measured, module docstring). The best persistent schedule's
        peak (``_persistent_min_peak``) is reachable; below it, bisection on the DP's own
        feasibility down to ``need`` (below it nothing fits). ``whole``: every size is a whole
        number of bytes, so peaks are whole and the bisection is exact; otherwise it stops at
        a relative 1e-12 above a budget found infeasible. ``solve(budget) -> (cost, peak)``:
        the root's answer (default: this DP's ``best``)."""
        root = (0, self.n - 1, 0)
        solve = solve or (lambda budget: self.best(*root, budget))
        high = self._persistent_min_peak()
        low = float(self.arrays.need[0, self.n - 1]) - (1.0 if whole else 0.0)  # infeasible
        probe = high - 1.0 if whole else None
        while high - low > (1.0 if whole else 1e-12 * abs(high)):
            if probe is None:
                probe = math.floor((low + high) / 2) if whole else (low + high) / 2
            cost, peak = solve(probe)
            if cost < INF:
                high = peak
            else:
                low = probe
            probe = None
        return high

    def _persistent_min_peak(self) -> float:
        """The smallest peak of a persistent schedule (no ``drop`` states)."""
        return float(self.least_peak_tables()[0][0][0, self.n - 1])

    def least_peak_tables(self, compiled: bool = True):
        """The persistent schedules of least peak: the recursion of ``best`` with max for +,
        by segment length, every segment of one length at once (numpy; in C where built and
        ``compiled``, the same operations and ties). Returns ``(peak,
        cost, first, keep)``, each indexed ``[top][s, t]``: the least peak of seg(s, t, top),
        the cost of the schedule chosen for it, its first checkpoint a_j and whether a_j stays
        for the stages below. Among choices of equal peak the cheaper wins (and the part
        below keeps a_j when that does not raise the peak): a schedule for any budget above
        the least peak, not the cheapest one. Cached per chain, like the DP's tables (auto's
        least-peak record, chain-dp's least peak and its fallback read them)."""
        use_c = compiled and COMPILED
        found = _LEAST_TABLES.get((self.c, use_c))
        if found is None:
            with interrupt.stopping(_OutOfTime):  # Ctrl-C: out of time, nothing kept
                found = _kept(_LEAST_TABLES, (self.c, use_c),
                              lambda: self._least_peak_tables(use_c))
        return found

    def _least_peak_tables(self, use_c: bool):
        n, fp = self.n, np.array(self.fp)
        mem, base = np.array(self.mem), np.array(self.base)
        above = np.array(self.grad[1:n + 1])  # above[t]: gradient over segment ..t
        workspace = np.array(self.fws)
        # one-layer segments: every value stored
        single_peak = self.arrays.store_peak.diagonal(axis1=1, axis2=2).copy()
        single_cost = np.array([[self.store_cost(s, s, top) for s in range(n)] for top in (0, 1)])
        if use_c:  # the same loops in C: 1.6 s -> 0.2 s at 512 layers
            found = _chain_dp_c.least_peak(n, fp, mem, workspace, base, above, single_peak,
                                           single_cost)
            return tuple(np.frombuffer(b, dtype=kind).reshape(2, n, n)
                         for b, kind in zip(found, (np.float64, np.float64, np.intc, np.intc)))
        peak, cost = np.full((2, n, n), INF), np.full((2, n, n), INF)
        first, keep = np.zeros((2, n, n), dtype=int), np.zeros((2, n, n), dtype=int)
        for top in (0, 1):
            peak[top, range(n), range(n)] = single_peak[top]
            cost[top, range(n), range(n)] = single_cost[top]
        for length in range(1, n):
            s = np.arange(n - length)
            t = s + length
            j = s[:, None] + np.arange(length)  # first checkpoint of segment s..t
            pair = mem[j] + workspace[j] + np.where(j > s[:, None], mem[j - 1], 0.0)
            sweep = np.maximum.accumulate(pair, axis=1) + (base[s] + above[t])[:, None]
            sweep_cost = fp[j + 1] - fp[s][:, None]
            for top in (0, 1):
                outer = np.maximum(sweep + (mem[t] * top)[:, None],
                                   base[s][:, None] + peak[top][j + 1, t[:, None]])
                outer_cost = sweep_cost + cost[top][j + 1, t[:, None]]
                options = [(np.maximum(outer, peak[e][s[:, None], j]),
                            outer_cost + cost[e][s[:, None], j]) for e in (0, 1)]
                kept = _lexically_less(*options[1], *options[0])
                both = [np.where(kept, a, b) for a, b in zip(options[1], options[0])]
                pick = _lexical_argmin(*both)
                rows = np.arange(len(s))
                peak[top][s, t] = both[0][rows, pick]
                cost[top][s, t] = both[1][rows, pick]
                first[top][s, t] = s + pick
                keep[top][s, t] = kept[rows, pick]
        return peak, cost, first, keep

    def least_peak_ops(self, ops: list) -> None:
        """Append the (stage, node) forward computations of the least-peak persistent
        schedule (``least_peak_tables``)."""
        _, _, first, keep = self.least_peak_tables()
        todo = [(0, self.n - 1, 0)]
        while todo:
            s, t, top = todo.pop()
            if s == t:
                self._sweep_ops(t, s, t - top, ops)
                continue
            j, e = int(first[top][s, t]), int(keep[top][s, t])
            self._sweep_ops(t, s, j, ops)
            todo += [(s, j, e), (j + 1, t, top)]  # the part above first, as in recomputed


class _Graded:
    """The persistent recursion over a grid of budgets (Rotor's discretization), in numpy:
    ``cost[top][s, t, k]``, the least cost of seg(s, t, top) within ``k * step`` bytes, where
    every part above a checkpoint gets its budget less the checkpoint's size rounded up to
    whole steps. So its schedules fit (exactly as ``best`` prices them) and cost at least the
    persistent optimum; O(n^3 * levels) array work (16 levels: 0.5-0.8 s at 192 layers, 5-8 s
    at 384). Raises ``_OutOfTime`` past ``deadline`` or on Ctrl-C (checked once per segment
    length)."""

    def __init__(self, dp: _ChainDP, free_mem: float, levels: int,
                 deadline: float | None = None):
        step, levels = _grid(dp.mem, free_mem, levels)
        self.dp, self.levels = dp, levels
        n, fp = dp.n, np.array(dp.fp)
        budgets = free_mem - step * np.arange(levels, -1, -1)  # the root's budget is on it
        mem, base = np.array(dp.mem), np.array(dp.base)
        self.shift = np.ceil(base / step - 1e-9).astype(int)  # base[s] in whole steps
        above = np.array(dp.grad[1:n + 1])
        workspace = np.array(dp.fws)
        self.cost = np.full((2, n, n, levels + 1), INF)
        self.choice = np.zeros((2, n, n, levels + 1), dtype=np.int32)  # 2 * (j - s) + keep
        for top in (0, 1):
            for s in range(n):
                single = dp.arrays.store_peak[top, s, s]
                if single <= free_mem:
                    self.cost[top, s, s] = np.where(budgets >= single,
                                                    dp.store_cost(s, s, top), INF)
        grid = np.arange(levels + 1)
        for length in range(1, n):
            if past(deadline):
                raise _OutOfTime
            s = np.arange(n - length)
            t = s + length
            j = s[:, None] + np.arange(length)
            pair = mem[j] + workspace[j] + np.where(j > s[:, None], mem[j - 1], 0.0)
            sweep = np.maximum.accumulate(pair, axis=1) + (base[s] + above[t])[:, None]
            sweep_cost = fp[j + 1] - fp[s][:, None]
            lowered = grid[None, :] - self.shift[s][:, None]  # the level of the part above
            reached = (lowered >= 0)[:, None, :]
            lowered = np.maximum(lowered, 0)[:, None, :]
            below = [self.cost[e][s[:, None], j] for e in (0, 1)]  # (segments, choices, levels)
            keep = below[1] <= below[0]
            below = np.where(keep, below[1], below[0]) + sweep_cost[:, :, None]
            rows = np.arange(len(s))[:, None]
            for top in (0, 1):
                fits = reached & ((sweep + (mem[t] * top)[:, None])[:, :, None] <= budgets)
                upper = self.cost[top][(j + 1)[:, :, None], t[:, None, None], lowered]
                total = np.where(fits, upper, INF) + below
                pick = total.argmin(axis=1)  # (segments, levels)
                self.cost[top][s, t] = total[rows, pick, grid]
                self.choice[top][s, t] = 2 * pick + keep[rows, pick, grid]

    @property
    def feasible(self) -> bool:
        return self.cost[0][0, self.dp.n - 1, self.levels] < INF

    def ops(self, ops: list) -> None:
        """Append the (stage, node) forward computations of the root's schedule."""
        todo = [(0, self.dp.n - 1, 0, self.levels)]
        while todo:
            s, t, top, k = todo.pop()
            if s == t:
                self.dp._sweep_ops(t, s, t - top, ops)
                continue
            j, e = divmod(int(self.choice[top][s, t, k]), 2)
            j += s
            self.dp._sweep_ops(t, s, j, ops)
            todo += [(s, j, e, k), (j + 1, t, top, k - self.shift[s])]


def _grid(sizes, free_mem: float, levels: int) -> tuple[float, int]:
    """(step, number of steps) of ``_Graded``'s budget grid: the greatest common divisor of
    whole-byte ``sizes`` where at most ``levels`` of it fit in ``free_mem`` (then no
    checkpoint's size is rounded up: exact), else ``levels`` equal steps."""
    whole = [int(v) for v in sizes if v > 0 and float(v).is_integer()]
    if whole and len(whole) == sum(v > 0 for v in sizes):
        divisor = math.gcd(*whole)
        if free_mem // divisor <= levels:
            return float(divisor), max(int(free_mem // divisor), 0)
    return free_mem / levels, levels


def _lexically_less(peak_a, cost_a, peak_b, cost_b):
    """Where (peak_a, cost_a) < (peak_b, cost_b), peaks compared first."""
    return (peak_a < peak_b) | ((peak_a == peak_b) & (cost_a < cost_b))


def _lexical_argmin(peak, cost):
    """Per row, the column of least peak, the cheapest among equal peaks."""
    return np.where(peak == peak.min(axis=1, keepdims=True), cost, INF).argmin(axis=1)


class _OutOfTime(Exception):
    """The search of the full class ran past its deadline."""


class _Search:
    """The running result of one split: the best (cost, peak, choice) so far (seeded with the
    caller's cutoff and incumbent) and the least lower bound on the choices cut off."""

    __slots__ = ("best", "peak", "choice", "least")

    def __init__(self, cutoff: float, incumbent):
        # slack: a cutoff passed down must not drop a tie lost to float rounding
        self.best, self.peak, self.choice = cutoff + _SLACK * abs(cutoff), INF, None
        if incumbent[0] <= self.best:
            self.best, self.peak, self.choice = incumbent
        self.least = INF

    def stop(self, bound: float) -> bool:
        """True (and the bound noted) when choices bounded below by ``bound`` cannot win."""
        if bound > self.best:
            self.least = min(self.least, bound)
            return True
        return False

    def missed(self, total: float, peak: float) -> bool:
        """True when a (partial) total cannot win: over the best, or a sub-answer that did
        not fit or was cut off (peak inf; ``total`` is then a lower bound or inf)."""
        if peak == INF or total > self.best:
            self.least = min(self.least, total)
            return True
        return False

    def settled(self, least: float) -> bool:
        """True when ``least`` bounds every remaining choice and the best meets it: they
        cannot win (noted as the bound on the choices cut off)."""
        if self.best <= least:
            self.least = min(self.least, least)
            return True
        return False

    def offer(self, total: float, peak: float, choice) -> None:
        """A schedule costing ``total`` <= best: kept if cheaper, or as cheap and lower."""
        if total < self.best or peak < self.peak:
            self.best, self.peak, self.choice = total, peak, choice

    def result(self):
        return (self.best, self.peak, self.choice) if self.choice else (self.least, INF, None)


class _Steps:
    """The solved budget intervals [low, high] of one DP state, sorted by ``low``, none inside
    another: a budget is answered by the interval with the largest low at or below it, if it
    reaches that far. ``low`` is the peak of the interval's schedule (-inf when nothing fits)."""

    __slots__ = ("low", "high", "cost", "choice", "above_at", "above")

    def __init__(self):
        self.low: list[float] = []
        self.high: list[float] = []
        self.cost: list[float] = []
        self.choice: list = []
        # facts from searches cut short: the cost is at least above[k] at every budget up
        # to above_at[k]; kept as a staircase (above_at rising, above falling)
        self.above_at: list[float] = []
        self.above: list[float] = []

    def bound(self, budget: float, i: int) -> float:
        """A lower bound on the least cost at ``budget`` (``i``: index of the last interval
        starting at or below it): the cost of the next interval up (more memory never costs
        more) or a recorded fact."""
        k = bisect_left(self.above_at, budget)
        fact = self.above[k] if k < len(self.above) else -INF
        return max(fact, self.cost[i + 1]) if i + 1 < len(self.cost) else fact

    def add_bound(self, budget: float, value: float) -> None:
        """Record that the cost is at least ``value`` at every budget up to ``budget``."""
        k = bisect_left(self.above_at, budget)
        if k < len(self.above) and self.above[k] >= value:
            return
        end = k + 1 if k < len(self.above_at) and self.above_at[k] == budget else k
        start = k
        while start > 0 and self.above[start - 1] <= value:
            start -= 1
        self.above_at[start:end], self.above[start:end] = [budget], [value]

    def answer(self, i: int) -> tuple[float, float]:
        """(cost, peak) of interval ``i``; the peak is inf where nothing fits, as callers
        test it."""
        cost = self.cost[i]
        return cost, (self.low[i] if cost < INF else INF)

    def find(self, budget: float) -> int:
        """Index of the interval holding ``budget``, or -1."""
        i = bisect_right(self.low, budget) - 1
        return i if i >= 0 and budget <= self.high[i] else -1

    def add(self, budget: float, cost: float, peak: float, choice) -> int:
        """Record the optimum solved at ``budget`` (a miss); returns its index. Intervals
        starting in [peak, budget] end before ``budget`` (it was a miss), so they lie inside
        the new one and go."""
        low = peak if cost < INF else -INF
        i = bisect_left(self.low, low)
        j = i
        while j < len(self.low) and self.low[j] <= budget:
            j += 1
        self.low[i:j], self.high[i:j] = [low], [budget]
        self.cost[i:j], self.choice[i:j] = [cost], [choice]
        return i


def _prefix(values) -> list[float]:
    out = [0.0]
    for v in values:
        out.append(out[-1] + v)
    return out


def _segment_ids(dp: _ChainDP) -> np.ndarray:
    """``ids[s, t]`` (0, 1, ... on and above the diagonal, -1 below): equal for two segments
    exactly when their DP subproblems are identical (same base size, same layer costs and
    sizes in order, same gradient above). Length by length: a segment's class is that of its
    prefix one layer shorter and its last layer, so each length is one ``np.unique`` over O(n)
    pairs."""
    n = dp.n
    layers = np.array([(dp.fcost[k], dp.mem[k], dp.grad[k], dp.bcost[k], dp.fws[k], dp.bws[k])
                       for k in range(n)]) + 0.0  # + 0.0: -0.0 equals 0.0, as in Python
    kind = np.unique(layers, axis=0, return_inverse=True)[1].ravel()
    above = _classes(np.array(dp.grad[1:n + 1]) + 0.0)  # above[t]: the gradient g_{t+1}
    prefix = _classes(np.array(dp.base) + 0.0)  # prefix[s]: class of base a_{s-1}, a_s..a_t
    ids, count = np.full((n, n), -1, dtype=np.intp), 0
    for length in range(1, n + 1):
        s = np.arange(n - length + 1)
        t = s + length - 1
        prefix = _classes(prefix[:len(s)] * (n + 1) + kind[t])
        whole = _classes(prefix * (n + 1) + above[t])
        ids[s, t] = count + whole
        count += int(whole.max()) + 1
    return ids


def _classes(values: np.ndarray) -> np.ndarray:
    """Each value's class: equal values, equal classes, numbered 0, 1, ..."""
    return np.unique(values, return_inverse=True)[1].ravel()


def _range_tables(dp: _ChainDP) -> tuple[np.ndarray, np.ndarray]:
    """``need[s, t]``: the largest candidate of one backward node b_k, s <= k <= t (with base
    a_{s-1}), counting only its operands, output and workspace: a lower bound for every
    schedule of stages b_t..b_s. ``store_peak[top, s, t]``: the exact peak of stages
    b_t..b_s when every value is stored (each forward node of the sweep with its workspace,
    then each b_k). Row by row in numpy, with the float operations of the scalar loop (so
    the same values to the bit), inf below the diagonal."""
    n, m, g = dp.n, np.array(dp.mem), np.array(dp.grad)
    prefix = np.array(_prefix(dp.mem))
    out = g[:n] + np.array(dp.bws)  # what b_k allocates besides its operands
    first = m + g[1:] + out  # b_s's operands (a_{s-1} is the base)
    pair = np.full(n, -INF)  # b_k's operands, k > s
    pair[1:] = m[:-1] + m[1:] + g[2:] + out[1:]
    stored = prefix[1:] + g[1:] + out  # a_s..a_k resident, then b_k
    sweep = prefix[1:] + np.array(dp.fws)  # f_i with a_s..a_{i-1} resident
    need = np.full((n, n), INF)
    store = np.full((2, n, n), INF)
    for s in range(n):
        base = dp.base[s]
        operands = pair[s:].copy()
        operands[0] = first[s]
        need[s, s:] = base + np.maximum.accumulate(operands)
        kept = (base - prefix[s]) + np.maximum.accumulate(stored[s:])
        above = base + g[s + 1:] - prefix[s]
        swept = np.maximum.accumulate(sweep[s:])
        # top=1: a_t is resident, the sweep stops at f_{t-1}; top=0: it computes f_t too
        store[1, s, s:] = np.maximum(kept, above + m[s:] + np.concatenate(([-INF], swept[:-1])))
        store[0, s, s:] = np.maximum(kept, above + swept)
    return need, store


def whole_sizes(chain: Chain) -> bool:
    """True when every size is a whole number of bytes (then every peak the DP adds up is an
    exact integer in float arithmetic)."""
    sizes = chain.fwd_mem + chain.grad_mem + chain.fwd_ws + chain.bwd_ws + (chain.loss_ws,)
    return all(float(v).is_integer() and abs(v) < 2 ** 50 for v in sizes)


def usable(chain: Chain, free_mem: float) -> float:
    """``free_mem`` rounded down to whole bytes when every size is whole: then ``budget -
    base`` and ``base + peak`` round-trip and the interval bookkeeping is exact."""
    if math.isfinite(free_mem) and whole_sizes(chain):
        return float(math.floor(free_mem))
    return free_mem


def _deep_recursion(chain: Chain):
    """The recursion nests about 3 frames per layer on each of its two kinds of state."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 60 * chain.n + 1000))
    return limit


def optimal_cost(chain: Chain, free_mem: float, deadline: float | None = None,
                 compiled: bool = True) -> tuple[float, "_ChainDP | _Compiled"]:
    """The least compute cost within ``free_mem`` bytes above static memory (inf if none),
    and the DP that found it: the persistent recursion, then the full class searched for
    something cheaper (``search_below``); in C where built and ``compiled``."""
    cost, persistent = persistent_cost(chain, free_mem, compiled=compiled)
    return search_below(chain, free_mem, cost, persistent, deadline, compiled)


def distinct_segments(chain: Chain) -> int:
    """How many different segment subproblems the DP has (segments of equal content share
    their states): what its time grows with. Heterogeneous linear(n): (n+1)(n+2)/2, 8385 at
    n = 128 (persistent recursion in C 0.03-0.06 s, in Python ~2 s) and 18721 at 192 (C
    0.13-0.7 s, Python 12-38 s); unit chains 3n."""
    return int(_ChainDP(chain, extended=False).arrays.segment_id.max()) + 1


def persistent_cost(chain: Chain, free_mem: float, deadline: float | None = None,
                    compiled: bool = True) -> tuple[float, "_ChainDP | _Compiled"]:
    """The least cost of a persistent schedule (Rotor's class; fast), and its DP. Raises
    ``_OutOfTime`` past ``deadline``, or on Ctrl-C within a ``catching()`` scope.
    ``compiled``: by the C recursion where it was built (``_Compiled``; heterogeneous chains:
    0.03-0.06 s at n = 128, 0.8-2.5 s at 256, 3-18 s at 384), else by the Python one (~2 s
    at n = 128, 12-38 s at 192, 59-95 s at 256, bench/results/fast_notes.md, sessions 10 and
    16)."""
    if compiled and COMPILED:
        persistent = _Compiled(chain, usable(chain, free_mem), deadline)
        return persistent.cost, persistent
    limit = _deep_recursion(chain)
    try:
        persistent = _ChainDP(chain, extended=False, deadline=deadline)
        return persistent.best(0, persistent.n - 1, 0, usable(chain, free_mem))[0], persistent
    finally:
        sys.setrecursionlimit(limit)


def persistent_fits(chain: Chain, free_mem: float, deadline: float | None = None) -> bool:
    """Whether some persistent schedule fits ``free_mem`` bytes above static memory (False
    also when the recursion is not done by ``deadline``; in C it keeps what it found)."""
    try:
        return persistent_cost(chain, free_mem, deadline)[0] < INF
    except _OutOfTime:
        return False


class _Compiled:
    """A recursion of ``_ChainDP`` (persistent, or the full class if ``extended``) run in C
    (``_chain_dp_c.c``) at one budget and cutoff (those of ``best``): the same states, order
    and float operations, so the same cost, schedule and number of solves (``solves``: this
    call's) from a cold start. Holds the answer; the persistent recursion's states stay in C,
    kept per chain (``_STATES``), so a later budget of the same chain starts from every search
    finished before, including those of a call that ran out of time. The full class starts
    cold each time: its searches are mostly proofs below a cutoff, and kept stores made them
    slower (linear(128, unit) at 5% of the range: 1.43 s cold, 1.64-2.15 s after other
    budgets, with fewer solves: session 17). Raises ``_OutOfTime`` past ``deadline``, or on
    Ctrl-C within a ``catching()`` scope (``interrupt.stopping``)."""

    def __init__(self, chain: Chain, budget: float, deadline: float | None,
                 extended: bool = False, cutoff: float = INF):
        self.c, self.budget = chain, budget
        self.complete = extended
        tables = _ChainDP(chain, extended=False)
        self.n = tables.n
        if extended:  # the C recursion, no searches yet
            state = _chain_dp_c.new_state(tables.n, *_packed(tables), True)
        else:
            _wait_for(chain, deadline)
            state = _kept_state(chain, tables)
        seconds = _seconds_to(deadline)
        try:
            with interrupt.stopping(_OutOfTime):  # Ctrl-C: out of time, the stores kept
                found = _chain_dp_c.solve(state, float(budget), float(cutoff), seconds)
        except (RuntimeError, MemoryError):
            _drop_state(chain, state)
            raise
        if found is None:
            raise _OutOfTime
        self.cost, self.peak, self.solves, sweeps = found
        self.ops: list[tuple[int, int]] = []
        for k in range(0, len(sweeps), 3):
            tables._sweep_ops(*sweeps[k:k + 3], self.ops)

    def schedule_ops(self, budget: float) -> list[tuple[int, int]]:
        """The (stage, node) forward recomputations of the schedule found."""
        if budget != self.budget or self.peak == INF:
            raise RematError(f"chain-dp: the compiled recursion has no schedule for budget "
                             f"{budget} (it solved {self.budget})")
        return list(self.ops)


class Ahead:
    """The persistent C recursion of ``graph`` at ``budget``, run in a thread (the C code
    releases the GIL) until ``deadline`` while the caller does other work: auto starts it
    where chain-dp comes after retention, so that on two cores the recursion has the whole
    limit instead of what retention leaves. It first runs the strided recursions
    (``strides``, within ``STRIDED_SHARE`` of its time, all of it on ``strided_only`` chains;
    their schedules are recorded for ``_fallback``), then, but on those chains, the whole one
    below the cheapest of them (a cutoff that holds: each strided class is a subset of the
    whole). Its finished searches stay in the chain's kept
    state; chain-dp's own call on the chain (``_Compiled``) waits for it first (until its own
    deadline, then stops it) and resumes from there. ``stop()`` ends it (auto's last step).
    Where the C recursions were not built it does nothing."""

    def __init__(self, graph: RematGraph, budget: float, deadline: float):
        self.chain = chain_of(graph)
        self.thread = None
        self.stopping = threading.Lock()
        self.switch = threading.Lock()  # the state the thread searches, or None once halted
        self.current, self.halted = None, False
        if not COMPILED or self.chain in _AHEAD:
            return
        free_mem = usable(self.chain, float(budget) - graph.static_mem)
        self.tables = _ChainDP(self.chain, extended=False)
        self.whole = not strided_only(self.chain)
        self.state = _kept_state(self.chain, self.tables) if self.whole else None
        seconds = max(deadline - time.perf_counter(), 0.0)
        self.thread = threading.Thread(target=self._run, args=(free_mem, seconds), daemon=True,
                                       name="remat-chain-dp")
        _AHEAD[self.chain] = self
        self.thread.start()

    def _run(self, free_mem: float, seconds: float) -> None:
        start = time.perf_counter()
        share = STRIDED_SHARE if self.whole else 1.0
        cutoff = _strided_passes(self.tables, free_mem, start + share * seconds, self._begin)
        if not self.whole or self._begin(lambda: self.state) is None:
            return
        try:
            _chain_dp_c.solve(self.state, free_mem, cutoff, start + seconds - time.perf_counter(),
                              True)
        except (RuntimeError, MemoryError):
            _drop_state(self.chain, self.state)

    def _begin(self, make):
        """The state ``make()`` gives, to search next, or None once stopped."""
        with self.switch:
            if self.halted:
                return None
            self.current = make()
            return self.current

    def running(self) -> bool:
        """Whether the recursion still runs (it holds a core: auto's retention then runs
        no search beside its own)."""
        return self.thread is not None and self.thread.is_alive()

    def wait(self, deadline: float | None) -> None:
        """Until the recursion ends, or ``deadline`` (or Ctrl-C, ``past``), then stop it."""
        thread = self.thread
        while thread is not None and thread.is_alive() and not past(deadline):
            thread.join(WAIT_POLL_SECONDS)
        self.stop()

    def stop(self) -> None:
        with self.stopping:  # callers in two threads: one stops it, the other waits
            if self.thread is None:
                return
            with self.switch:
                self.halted = True
                if self.current is not None:
                    _chain_dp_c.stop(self.current, True)
            self.thread.join()
            if self.state is not None:
                _chain_dp_c.stop(self.state, False)
            self.thread = None
            _AHEAD.pop(self.chain, None)


_AHEAD: dict[Chain, Ahead] = {}
"""The recursions running ahead (``Ahead``), by chain."""
WAIT_POLL_SECONDS = 0.1
"""How often ``Ahead.wait`` looks for Ctrl-C while it waits."""


def layer_kinds(chain: Chain) -> int:
    """How many different layers (costs, sizes, workspaces) the chain has: O(n), where the
    segment count (``distinct_segments``) is O(n^2)."""
    return len(set(zip(chain.fwd_cost, chain.fwd_mem, chain.bwd_cost, chain.grad_mem,
                       chain.fwd_ws, chain.bwd_ws)))


def strided_only(chain: Chain) -> bool:
    """Whether chain-dp, given a time limit, runs only its fallbacks (the strided recursions
    first) on this chain, never the whole persistent recursion (``WHOLE_LAYERS``,
    ``LEAST_PEAK_LAYERS``); in C only. Below the least-peak persistent schedule (up to
    ``LEAST_PEAK_LAYERS``) it reports that peak as the least budget."""
    return COMPILED and chain.n > WHOLE_LAYERS[0] and (
        layer_kinds(chain) > WHOLE_LAYERS[1] or chain.n > LEAST_PEAK_LAYERS)


def strides(n: int) -> tuple[int, ...]:
    """The strides of the strided recursions on a chain of ``n`` layers (``STRIDED_LAYERS``)."""
    return tuple(stride * max(1, n // STRIDED_LAYERS) for stride in STRIDES)


def _strided_state(tables: _ChainDP, stride: int):
    """A persistent C recursion of ``tables``' chain in which a checkpoint a_j may be stored
    only where j % stride == stride - 1: a subset of the persistent class (every answer is a
    schedule that fits, none cheaper than the persistent optimum), of fewer states. Its
    segments are keyed by position (the mask breaks equal content): only those it can reach,
    from the input or a stored a_j up to a stored a_j or the loss."""
    n = tables.n
    stored = np.zeros(n, dtype=np.uint8)
    stored[stride - 1:n - 1:stride] = 1
    starts = np.concatenate(([0], np.flatnonzero(stored) + 1))
    tops = np.concatenate((np.flatnonzero(stored), [n - 1]))
    first, last = np.meshgrid(starts, tops, indexing="ij")
    reached = first <= last
    segment = np.zeros((n, n), dtype=np.intc)
    segment[first[reached], last[reached]] = np.arange(int(reached.sum()), dtype=np.intc)
    return _chain_dp_c.new_state(n, *_packed(tables)[:-2], segment, int(reached.sum()), False,
                                 stored.tobytes())


def _strided_passes(tables: _ChainDP, free_mem: float, deadline: float | None,
                    begin=None) -> float:
    """The strided recursions of ``strides(n)`` in turn, each until ``deadline`` and recorded
    (``_strided``); the least cost found (inf if none). ``begin``: ``Ahead._begin`` (its
    thread: the recursions run without the GIL and stop when it is stopped), else they run
    here. A failing one (memory, a C state error) is skipped: these are fallbacks."""
    least = INF
    for stride in strides(tables.n):
        if past(deadline):  # (or Ctrl-C: no state built for nothing)
            break
        try:
            make = functools.partial(_strided_state, tables, stride)
            state = make() if begin is None else begin(make)
            if state is None:  # stopped
                break
            found = _strided(tables, state, free_mem, deadline, stride,
                             threaded=begin is not None)
        except (RuntimeError, MemoryError):
            continue
        if found is not None:
            least = min(least, found[0])
    return least


def _strided(tables: _ChainDP, state, free_mem: float, deadline: float | None, stride: int,
             threaded: bool = False) -> tuple[float, list[tuple[int, int]]] | None:
    """(cost, forward recomputations) of the cheapest schedule of the strided recursion
    ``state`` (``_strided_state``) within ``free_mem`` (usable), recorded for ``_fallback``
    (``_STRIDED``); None where none fits, past ``deadline`` (None: no limit) or on Ctrl-C."""
    seconds = _seconds_to(deadline)
    try:
        with contextlib.nullcontext() if threaded else interrupt.stopping(_OutOfTime):
            found = _chain_dp_c.solve(state, free_mem, INF, seconds, threaded)
    except _OutOfTime:  # Ctrl-C
        return None
    if found is None or found[1] == INF:
        return None
    ops: list[tuple[int, int]] = []
    for k in range(0, len(found[3]), 3):
        tables._sweep_ops(*found[3][k:k + 3], ops)
    records = _kept(_STRIDED, tables.c, list)
    records.append((free_mem, stride, ops))
    del records[:-STRIDED_KEPT]
    return found[0], ops


_STRIDED: dict[Chain, list] = {}
"""The schedules of the strided recursions (``_strided``), by chain: (usable free memory,
stride, forward recomputations), the last ``STRIDED_KEPT``."""
STRIDED_KEPT = 8


def _kept_state(chain: Chain, tables: _ChainDP):
    """The chain's kept persistent C recursion (``_STATES``), made without searches on a
    miss."""
    return _kept(_STATES, chain,
                 lambda: _chain_dp_c.new_state(tables.n, *_packed(tables), False))


def _drop_state(chain: Chain, state) -> None:
    """A search on ``state`` failed (memory, a lost interval): its stores cannot be trusted,
    so a kept one is dropped and the next call starts afresh."""
    if _STATES.get(chain) is state:
        _STATES.pop(chain)


def _seconds_to(deadline: float | None) -> float:
    """The C recursion's time limit for ``deadline``: seconds left, -1 for none."""
    return -1.0 if deadline is None else max(deadline - time.perf_counter(), 0.0)


def _wait_for(chain: Chain, deadline: float | None) -> None:
    """A recursion running ahead on ``chain``: wait for it (``Ahead.wait``)."""
    ahead = _AHEAD.get(chain)
    if ahead is not None:
        ahead.wait(deadline)


def _packed(tables: _ChainDP) -> tuple:
    """The C recursion's table arguments for ``tables``' chain (``_chain_dp_c.c``), cached
    like the tables (a bisection calls it per probe: 30 ms each at 512 layers)."""
    def pack() -> tuple:
        arrays = tables.arrays
        segment = np.maximum(arrays.segment_id, 0).astype(np.intc)
        return tuple(np.ascontiguousarray(v, dtype=np.float64) for v in (
            tables.fp, tables.bp, tables.fcost, tables.mem, tables.fws, tables.grad,
            tables.base, arrays.need, arrays.own, arrays.store_peak)) + (
                segment, int(arrays.segment_id.max()) + 1)

    return _kept(_PACKED, tables.c, pack)


def search_below(chain: Chain, free_mem: float, cost: float, persistent: "_ChainDP | _Compiled",
                 deadline: float | None = None,
                 compiled: bool = True) -> tuple[float, "_ChainDP | _Compiled"]:
    """Search the full class for a schedule cheaper than ``cost`` (the persistent optimum);
    its cutoff makes the search mostly a proof. Returns the least cost and the DP holding its
    schedule (``complete`` True); past ``deadline`` (a ``time.perf_counter()`` value, or
    Ctrl-C) the persistent answer, ``complete`` False."""
    budget, cutoff = usable(chain, free_mem), cost * (1 - 1e-12)
    limit = _deep_recursion(chain)
    try:
        if compiled and COMPILED:
            full = _Compiled(chain, budget, deadline, extended=True, cutoff=cutoff)
            better, peak = full.cost, full.peak
        else:
            full = _ChainDP(chain, deadline=deadline)
            better, peak = full.best(0, full.n - 1, 0, budget, cutoff)
    except _OutOfTime:
        return cost, persistent
    finally:
        sys.setrecursionlimit(limit)
    if peak < INF or cost == INF:
        return min(better, cost), full
    persistent.complete = True  # nothing in the full class is cheaper
    return cost, persistent


def min_free_mem(chain: Chain, deadline: float | None = None) -> float:
    """The smallest peak above static memory of any schedule of ``chain`` in the DP's class
    (past ``deadline``: of any persistent schedule, an upper bound; inf where Ctrl-C came
    before either was known); each probe of the bisection in C where built (a fresh search per
    probe), else in one Python DP."""
    def compiled(budget: float) -> tuple[float, float]:
        found = _Compiled(chain, budget, deadline, extended=True)
        return found.cost, found.peak

    limit = _deep_recursion(chain)
    try:
        return _ChainDP(chain, deadline=deadline).min_peak(whole_sizes(chain),
                                                            compiled if COMPILED else None)
    except _OutOfTime:
        try:
            return _ChainDP(chain)._persistent_min_peak()
        except _OutOfTime:  # Ctrl-C before its tables were made: nothing known
            return INF
    finally:
        sys.setrecursionlimit(limit)


def schedule(graph: RematGraph, dp: "_ChainDP | _Compiled",
             free_mem: float) -> tuple[np.ndarray, np.ndarray]:
    """R/S of the optimal schedule the DP found (every node in its own stage, plus the
    forward recomputations of the backward stages)."""
    return _r_s(graph, dp.schedule_ops(usable(dp.c, free_mem)))


def _r_s(graph: RematGraph, ops: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """R/S of a schedule given as its (stage, node) forward recomputations."""
    R = np.eye(graph.size, dtype=bool)
    for stage, node in ops:
        R[stage, node] = True
    return R, s_from_r(graph, R)


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    start = time.perf_counter()
    deadline = None if options.time_limit is None else start + options.time_limit
    chain = chain_of(graph)
    if deadline is not None and strided_only(chain):
        # a persistent schedule's least peak: below it none of this class fits
        least = least_peak(graph) if chain.n <= LEAST_PEAK_LAYERS else None
        if least is not None and budget < least:
            return Solution.infeasible(graph, "chain-dp", budget, min_budget=least,
                                       solve_time=time.perf_counter() - start)
        _wait_for(chain, deadline)
        return _fallback(graph, chain, budget, start, deadline)
    free_mem = float(budget) - graph.static_mem
    reserve = 0.0 if options.initial is not None else FALLBACK_SHARE
    try:
        cost, dp = persistent_cost(chain, free_mem, _before(start, deadline, reserve))
    except _OutOfTime:
        return _fallback(graph, chain, budget, start, deadline)
    known = None
    if cost < INF:  # where the retention bound meets it, nothing is cheaper: no search
        known = retention_bound(graph, budget, _first_bound_time(graph, budget, options),
                                options.threads, enough=cost)
        dp.complete = meets(cost, known.value)
    if not dp.complete:
        cost, dp = search_below(chain, free_mem, cost, dp, deadline)
    if cost == INF:
        least = graph.static_mem + min_free_mem(chain, deadline)
        return Solution.infeasible(graph, "chain-dp", budget,
                                   min_budget=least if least < INF else None,
                                   solve_time=time.perf_counter() - start)
    R, S = schedule(graph, dp, free_mem)
    if known is None or not meets(cost, known.value):  # the time left goes to the proof
        limit = bound_time(options.time_limit)
        if deadline is not None:
            limit = max(limit, deadline - time.perf_counter())
        known = retention_bound(graph, budget, limit, options.threads, enough=cost)
    # optimal over all schedules where the retention bound meets it (module docstring)
    status = "optimal" if meets(cost, known.value) else \
        ("timeout" if not dp.complete or known.status == "timeout" else "feasible")
    sol = Solution.from_schedule(graph, R, S, "chain-dp", status, budget,
                                 lower_bound=known.value,
                                 solve_time=time.perf_counter() - start,
                                 states=dp.solves, optimal_in_class=dp.complete)
    if sol.peak_memory > budget or not np.isclose(sol.compute_cost, cost, rtol=1e-9):
        raise RematError(f"chain-dp: internal error, the DP's schedule simulates to cost "
                         f"{sol.compute_cost} and peak {sol.peak_memory} (DP: cost {cost} within "
                         f"{budget}); please report this graph")
    return sol


def _first_bound_time(graph: RematGraph, budget: float, options: SolveOptions) -> float:
    """The time of the bound that may spare the search of the full class: a tenth of the
    limit, and where the moment model forces computations (``forcing_time``) that much more,
    up to half of the limit: at a unit chain's least peak they are the optimum
    (linear(512, unit): 1047553 columns, 2.8 s; auto proved it in 16 s, 10 of them in this
    search, before)."""
    first = bound_time(options.time_limit)
    forcing = forcing_time(graph, budget)
    if not forcing:
        return first
    return first + forcing if options.time_limit is None else \
        max(first, min(first + forcing, options.time_limit / 2))


def _before(start: float, deadline: float | None, reserve: float) -> float | None:
    """The deadline that leaves ``reserve`` of the time from ``start`` to ``deadline``."""
    return None if deadline is None else deadline - reserve * (deadline - start)


def _fallback(graph: RematGraph, chain: Chain, budget: float, start: float,
              deadline: float | None) -> Solution:
    """What ``solve`` returns when its time ran out (or Ctrl-C came) before the persistent
    recursion finished: the cheapest that fits of the least-peak persistent schedule
    (``least_peak_tables``; up to ``LEAST_PEAK_LAYERS``), the strided recursions'
    (``strides``: those ``Ahead`` recorded at this budget, else, in C, run here within the
    time left) and, except on ``strided_only`` chains, ``_Graded``'s on grids of
    ``GRADED_LEVELS``, twice as many, ... levels (while the last run, taken 2.2 times, still
    ends before ``deadline``; a grid still running at ``deadline`` is dropped: at 10% of
    heterogeneous linear(1024)'s budget range a 30 s call took 30.1 s with the grid, 13.9 s
    without, the same stride-4 schedule), status "timeout" with the trivial bound (every node
    once); no schedule if none fits. After a Ctrl-C only what is ready: the tables and the
    strided schedules already made."""
    free_mem = float(budget) - graph.static_mem
    dp, strided = _ChainDP(chain, extended=False), strided_only(chain)
    found = _least_peak_schedule(graph, dp, budget) if chain.n <= LEAST_PEAK_LAYERS else []
    for _, stride, ops in _strided_at(dp, usable(chain, free_mem), deadline):
        found += _fitting(graph, budget, lambda out, ops=ops: out.extend(ops),
                          f"strided-{stride}")
    took, levels = 0.0, GRADED_LEVELS
    while not strided and free_mem > 0 and not past(deadline) and \
            (deadline is None or time.perf_counter() + 2.2 * took < deadline):
        began = time.perf_counter()
        try:
            graded = _Graded(dp, free_mem, levels, deadline)
        except _OutOfTime:
            break
        if graded.feasible:
            found += _fitting(graph, budget, graded.ops, f"graded-{graded.levels}")
        took = time.perf_counter() - began
        if graded.levels < levels:  # an exact grid (``_grid``): more levels change nothing
            break
        levels *= 2
    if not found:
        return Solution.infeasible(graph, "chain-dp", budget, None, reason=NO_SCHEDULE_YET,
                                   solve_time=time.perf_counter() - start)
    best = min(found, key=lambda sol: (sol.compute_cost, sol.peak_memory))
    return replace(best, solve_time=time.perf_counter() - start)


def _strided_at(tables: _ChainDP, free_mem: float, deadline: float | None) -> list[tuple]:
    """The strided schedules recorded at ``free_mem`` (``_STRIDED``); where there are none,
    those of the strided recursions run now, in C, each until ``deadline``."""
    kept = [record for record in _STRIDED.get(tables.c, ()) if record[0] == free_mem]
    if kept or not COMPILED:
        return kept
    _strided_passes(tables, free_mem, deadline)
    return [record for record in _STRIDED.get(tables.c, ()) if record[0] == free_mem]


def least_peak(graph: RematGraph) -> float | None:
    """The simulated peak (bytes, static included) of the chain's least-peak persistent
    schedule (``least_peak_tables``, in C, then the simulator; unit chains, tables included):
    0.03 s at 128 layers, 0.13 s at 256, 0.32 s at 384, 0.57 s at 512 (numpy: 0.13 s at 128,
    0.66 s at 256, 2 s at 512). Cached per graph. None where Ctrl-C stopped the tables."""
    if graph not in _LEAST_PEAK:
        found = _least_peak_schedule(graph, _ChainDP(chain_of(graph), extended=False),
                                     math.inf)
        if not found:
            return None
        _LEAST_PEAK[graph] = found[0].peak_memory
    return _LEAST_PEAK[graph]


_LEAST_PEAK: "weakref.WeakKeyDictionary[RematGraph, float]" = weakref.WeakKeyDictionary()


def _least_peak_schedule(graph: RematGraph, dp: _ChainDP, budget: float) -> list[Solution]:
    """[the least-peak persistent schedule] (``_fitting``), or [] where it does not fit or
    Ctrl-C stopped its tables."""
    try:
        return _fitting(graph, budget, dp.least_peak_ops, "least-peak")
    except _OutOfTime:
        return []


def _fitting(graph: RematGraph, budget: float, fill, name: str) -> list[Solution]:
    """[the schedule whose forward recomputations ``fill`` lists], or [] if it does not fit."""
    ops: list[tuple[int, int]] = []
    fill(ops)
    sol = Solution.from_schedule(graph, *_r_s(graph, ops), "chain-dp", "timeout", budget,
                                 fallback=name)
    return [sol] if sol.peak_memory <= budget else []
