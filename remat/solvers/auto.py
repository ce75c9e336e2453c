"""``auto``: pick the method by the graph's shape and size; report the bound it proved.

Runs the methods that suit the graph in order of cost, stopping as soon as a schedule meets
the best lower bound proved so far, and returns the cheapest schedule that fits with that
bound: on chains of up to ``CHAIN_DP_MAX`` layers, or ``LONG_CHAIN`` (unit chains; on
heterogeneous ones only its strided recursions), ``chain-dp`` (its recursions stop at its
share of the time; first, where its DP is small, ``CHAIN_DP_FIRST``, so that where it proves
its schedule nothing else runs: on linear(384, unit) chen-greedy and ap-greedy take 0.5 s
each, and there retention gets a second before it where the DP is not that small,
``RETENTION_TRY``; else after ``retention``, its persistent recursion started at once in a
thread, ``chain_dp.Ahead``, beside the methods before it); the classic baselines (always, unless
chain-dp proved first; but not griewank where chain-dp runs: Revolve's schedules keep each
snapshot until its last reader, so they are in the persistent class that chain-dp searches
exactly, and its simulations of every slot count took 7.9 s of auto's 30 on heterogeneous
linear(384)); on chains, no floor search (``_floor``: a persistent schedule that fits, or the
least-peak persistent schedule recorded first, ``peak_floor.reached``); then auto proves the
retention bound itself (``remat.solvers.bounds``: a small knapsack, usually well under a second;
chain-dp proves its own) and runs ``retention`` (the schedule of the bound's knapsack, and
its local search); then ``milp``, started from the best schedule so far, on graphs of up to
``MILP_MAX_NODES`` nodes (not ``lp-rounding``, ``_methods``); then, past ``MILP_MAX_NODES``
on graphs that are not chains, ``cp-intervals`` (a CP-SAT search) from the cheapest schedule
so far, where that is more than ``CP_GAP`` above the bound: with half the time left where
retention's search ran out of time (``_search_left``; not with less than
``CP_LEAST_SECONDS``), and with the time the bound leaves
(``_search_after_bound``).
Where chain-dp searched its whole class and no milp follows, the rest of the time goes to
the bound (``_proof_left``); elsewhere too, where the methods end early with the cheapest
schedule more than ``LEFT_GAP`` above the bound (``_bound_left``). On chains past
``LONG_CHAIN`` layers (``_long_chain``): chain-dp's strided recursions first, then auto's
bound with most of the time left (``LONG_BOUND_SHARE``, less its overrun,
``LONG_BOUND_OVERRUN``), retention where that bound's knapsack is solved or its LP optimum
rounded down, and the baselines while time is left (none starts past the limit).
A budget below the least possible peak (``peak_floor.below_floor``: one node's operands, then
the pebbling bound; no schedule fits, proven) ends the call early with the least budget auto
can meet (``_below_floor``). Where no method found a schedule above it and none proved that
none fits, the time left goes to the least peak (``_lowest_left``) and the result says that
nothing is proven (``_none_found``).
``time_limit`` (default ``DEFAULT_TIME_LIMIT`` seconds) bounds the whole call: each method gets
what is left (``_share``: half of it when an exact method, or on chains the baselines after
retention, follow), so the call ends within the limit plus the last method's overrun (a HiGHS
solve or simulation in progress).
"""
from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import replace

from remat.graph.core import RematGraph
from remat.schedule.solution import Solution
from remat.solvers import interrupt
from remat.solvers.base import (BASELINES, CLASSIC, SolveOptions, applicable, method_applies,
                                past, solver)
from remat.solvers.bounds import (Bound, bound_time, gaps_of_one_size, meets,
                                  retention_bound)
from remat.solvers.chain_dp import (COMPILED, LEAST_PEAK_LAYERS, Ahead, chain_of,
                                    distinct_segments, least_peak, persistent_fits, strided_only)
from remat.solvers.cpsat import whole_bytes
from remat.solvers.min_budget import min_budget
from remat.solvers.peak_floor import below_floor, known_floor, reached

MILP_MAX_NODES = 80
"""milp proves optimality within seconds to a minute up to about this size (bench_milp.py)."""
DEFAULT_TIME_LIMIT = 30.0
CHAIN_DP_FIRST = (512, 40_000) if COMPILED else (256, 10_000)
"""chain-dp runs before retention on chains of at most this many layers (or, of few kinds of
layer, ``LONG_CHAIN``) whose DP has at most
this many distinct segments (``chain_dp.distinct_segments``): its persistent recursion then
takes at most seconds. In C (``chain_dp.COMPILED``): heterogeneous linear(256), 33153
segments, 0.8-2.5 s at 0-60% of the budget range; unit chains of 512 layers, 1536 segments,
0.2-0.5 s (bench/results/fast_notes.md, session 16). In Python: heterogeneous linear(128),
8385 segments, ~2.5 s; unit chains of 256 layers, 768 segments, 3.2 s; heterogeneous
linear(192) (18721) takes 12-38 s, and there retention, first, proves 30% and 60% in 3.6 and
2.7 s (session 10)."""
CHAIN_DP_MAX = (512, 140_000) if COMPILED else (384, 20_000)
"""Longer chains, or more segments, and auto leaves chain-dp out. In C: heterogeneous
linear(384) (74305 segments) takes 3-18 s, after retention, and heterogeneous linear(512)
(131841) 12-75 s: there it gets the time retention leaves (the whole of it: auto passes its
best schedule, ``chain_dp.FALLBACK_SHARE``), and where it does not finish, its least-peak
schedule, or a strided one (``chain_dp.STRIDES``: 1.2031 of the total cost at 10% of the
range, where chen-sqrtn's 1.3142 was the best before), is what it returns, and a later call
on the chain resumes the recursion;
heterogeneous linear(320) 1.8-6.6 s; unit chains of 768 layers 0.5-1.7 s, and their
least-peak schedule (``least_peak``, which auto records where no persistent schedule fits)
2.0 s (6.7 s before its tables ran in C). In Python: 10-12 s on unit chains of 384 layers,
26 s to over 30 s at 512, 59-95 s on heterogeneous linear(256) (33153 segments)."""
LONG_CHAIN = LEAST_PEAK_LAYERS if COMPILED else 0
"""Past ``CHAIN_DP_MAX`` layers, chain-dp still runs on chains of up to this many layers:
first on chains of few kinds of layer (a unit chain has 1), whose DP has few segments (3n on
unit chains): linear(1024, unit): chain-dp alone proves 10 / 30 / 60% of the budget range in
7.2 / 3.4 / 1.7 s, where auto without it returned chen-greedy's schedule after 32 s (0.3-4.2%
above its bound); after retention, only its strided recursions, on the others
(``chain_dp.strided_only``). Past it (``_long_chain``) chain-dp runs first, only its strided
recursions, on every chain; then auto's bound (``LONG_BOUND_SHARE``), retention, and the
baselines while time is left. Before, auto left chain-dp out there and overran its limit:
heterogeneous linear(2048) at 30% of its budget range took 76 s of 30 (a floor search of 3.3
s, retention 65 s of 10.6, then ap-sqrtn's 1.3225 of the total cost, no bound); now 18.3 s,
retention's 1.1040, proven optimal (chain-dp's strided recursion found 1.1296 in 1.8 s)."""
LONG_BOUND_SHARE = 2 / 3
"""On chains past ``LONG_CHAIN`` (``_long_chain``), the share of the time left after chain-dp
that auto's bound gets, and retention runs only where chain-dp found a schedule and that
bound's knapsack is solved (``Bound.kept_solved``) or, on heterogeneous chains, its LP
relaxation (``Bound.kept_rounded``: rounded down, near the knapsack's optimum; at 30 / 60% of
heterogeneous linear(4096)'s range retention starts there and ends 0.004 / 0.007% above the
bound, where before nothing had a bound and chain-dp's strided schedules, 1.1331 / 1.0618
of the total cost, stood): the knapsack is over thousands of gaps
(heterogeneous linear(2048) at 30% of its budget range: 10-17 s), and retention built from a
knapsack cut short kept one gap of 2048 and took 65 s of its 10.6 s (a schedule of 343 times
the total cost, whose tightening and two simulations each took 5-12 s); at linear(2048,
unit)'s least peak, where no strided schedule fits, retention's 512 times the total cost took
31.7 s past auto's limit."""
LONG_BOUND_OVERRUN = 2.5 / 2048 ** 2
"""Seconds per squared layer by which auto's bound on a heterogeneous chain past ``LONG_CHAIN``
may run past its limit (its model is built first, and HiGHS sets up O(n^2) nonzeros before it
looks at the clock: heterogeneous linear(2048), 5.3 s for 3; linear(4096), 26 s for 16, and
10.7 s from a cancel to its answer): the bound's limit is its share less this, and where that
leaves less than ``bounds.bound_time`` it is not started. Not on unit chains, whose knapsack
HiGHS gets as levels (``bounds.LEVELS_GAIN``): there the allowance, 40 s at 8192 layers, left
no bound; without it auto proved linear(8192, unit) at 30 / 60% of its range in 25.3 / 26.5 s
(one run each; at 10% chain-dp's tables and strided recursion left too little time for the
bound: 1.4499 of the total cost, unproven, 36.3 s)."""
LONG_CHAIN_SKIPS = ("chen-greedy", "ap-greedy")
"""The baselines auto leaves out on chains past ``LONG_CHAIN``: they simulate a schedule per
candidate, seconds each there, and never beat chain-dp's strided schedule: at 30% of
heterogeneous linear(2048)'s budget range 1.2227 of the total cost in 9.1 and 8.6 s, against
1.1296 in 1.8 s; at 10% of linear(4096, unit) chen-greedy's 25.5 s gave 1.4540, chain-dp 1.4498
in 4.4 s; at heterogeneous linear(2048)'s least peak chen-greedy took 8.2 s of its 7.9 and
found no schedule."""
BEFORE_BOUND = CLASSIC + ("chain-dp",)
"""The methods auto runs before proving its own bound: the classic baselines take
milliseconds, and chain-dp proves its own, stopping as soon as it meets its cost (auto's, with
no cost to stop at, ran for its whole 3 s of 30 on linear(128, unit=True) at 30%, which
chain-dp proves optimal in 0.6 s)."""
RETENTION_TRY = (20_000, 1.0)
"""(segments, seconds): on chains where chain-dp goes first with more DP segments than this
(heterogeneous linear(256): 33153; linear(192): 18721, whose persistent recursion takes
0.13-0.7 s), retention first, for at most this long (a tenth of the limit if less)."""
HALF_BEFORE = ("chain-dp", "milp", "cp-intervals")
"""The methods after the baselines: whoever comes before one of them leaves it half the time."""
CP_GAP = 0.01
"""``cp-intervals`` runs where the cheapest schedule before it is more than this above the
bound (the issue's goal), and only from a schedule (it is a search from one;
``_gap_open``)."""
CP_INSTALLED = importlib.util.find_spec("ortools") is not None
"""``cp-intervals`` needs OR-Tools (the ``cp`` extra); auto leaves it out without."""
NONE_FOUND = "no method found a schedule within the time limit"
"""``details["reason"]`` of auto's "infeasible" where nothing proved it."""
CP_LEAST_SECONDS = 0.5
"""The least share of the time for which ``cp-intervals`` gets its turn before the bound:
below it CP-SAT's start takes most of it (0.29 s on random_dag(500) 10% once the model is
built). In a sweep with 1 s it never returned the cheapest schedule, and its 0.1 s on U-Net op
50% took 0.45 s (bench/results/fast_notes.md, session 32)."""
LOWEST_LEFT_SECONDS = 0.1
"""The least time left worth a search for the least peak when no method found a schedule. At
1.0 (before session 35) gpt2 at op level, 30%, with 1 s, ended after 0.79 s with no schedule;
with the 0.21 s left, min_budget's schedule fits (1.523 of the total cost), and in the sweep
with 1 s no call ran further past the limit than before (bench/results/fast_notes.md,
session 35)."""
MIN_STEP_SECONDS = 0.1
"""The least time a method gets once the limit is spent (the baselines take milliseconds)."""
LEFT_GAP = 1e-4
"""Above this gap between the cheapest schedule and the bound, the time the methods leave goes
to the bound (``_bound_left``). Below it, a gap is a matter of the solvers' tolerances, and
the call ends early: mobilenet_v2 at module level, 50 / 70 / 90%, ends 2.5e-7 to 8.1e-7 above
the bound after 15-20 s of 60 (bench/results/bounds_mid_auto60.csv)."""
LEFT_SECONDS = 1.0
"""The least time left for which ``_bound_left`` runs the bound again."""
CHAIN_DP_SECONDS = 10.0
"""The most auto gives chain-dp: past it the persistent schedule stands (or, where the
persistent recursion itself did not finish, its least-peak schedule), and retention and milp
(short chains) get their turn sooner."""


def candidate_methods(graph: RematGraph) -> list[str]:
    """The methods ``auto`` tries on this graph, cheapest first; but on chains where chain-dp
    comes after retention, or does not run, retention right after checkpoint-all: it proves
    them optimal at moderate budgets in well under a second, where chen-greedy and ap-greedy
    took 0.5 s each (heterogeneous linear(512) at 30% / 60% of its budget range: 0.79 / 0.92
    s in all, 2.0 / 2.1 s with the baselines first; bench/results/fast_notes.md, session
    20). Past ``LONG_CHAIN`` layers: chain-dp, retention, then the baselines but the greedy
    ones (``LONG_CHAIN_SKIPS``)."""
    return _methods(graph, _chain_dp_order(graph)[0])


def _methods(graph: RematGraph, after: bool | None) -> list[str]:
    """``candidate_methods`` with chain-dp's place (``_chain_dp_order``) known. Not
    ``lp-rounding`` (the LP relaxation of Checkmate's MILP, rounded): it ran after retention
    on graphs of 81-150 nodes (past 150 its LP did not finish in 30 s), and no auto row in
    bench/results chose it. Without it, 60 s, on gpt2 op 30/40/60%, VGG-16 op 70% and U-Net op
    50/60%: the same bounds and proofs, and costs within the spread of runs (gpt2 op 30%, two
    runs each: 1.217347 / 1.217278 of the total cost without, 1.217492 / 1.209146 with; gpt2
    op 40%: bound 1.087072 against 1.087057); gpt2 op 60% ends after 16.1 s, against 21.0-24.8
    s in three runs with it (bench/results/fast_notes.md, session 30). (milp's warm start may
    still run it, where no baseline fits.) Where cp-intervals does not run, retention is now
    last on these graphs and gets all the time left, as on larger ones."""
    methods = applicable(graph, BASELINES)
    if after is not None:  # Revolve's schedules are in chain-dp's persistent class
        methods = [m for m in methods if m != "griewank"]
    if after or (after is None and graph.is_chain):
        # retention proves chains optimal where they are not tight: before the baselines
        methods.remove("retention")
        methods.insert(methods.index("checkpoint-all") + 1, "retention")
    if after:
        methods.append("chain-dp")
    elif after is not None:  # first where quick: where it proves, nothing else runs
        methods.insert(0, "chain-dp")
    if _long_chain(graph, after):  # then the bound and retention, before the baselines
        methods.remove("retention")
        methods.insert(1, "retention")
        methods = [m for m in methods if m not in LONG_CHAIN_SKIPS]
    if graph.size <= MILP_MAX_NODES:
        methods.append("milp")
    if graph.size > MILP_MAX_NODES and not graph.is_chain and CP_INSTALLED and \
            whole_bytes(graph):
        methods.append("cp-intervals")
    return methods


def _chain_dp_order(graph: RematGraph) -> tuple[bool | None, bool]:
    """(after, retention first). Where auto runs chain-dp: before retention (False) where its
    recursion takes seconds (``CHAIN_DP_FIRST``), after it (True) up to ``CHAIN_DP_MAX`` and
    where it runs only its strided recursions up to ``LONG_CHAIN`` layers
    (``chain_dp.strided_only``), first again past it (``_long_chain``), not at all (None)
    beyond ``CHAIN_DP_MAX`` without the C extension or on other graphs; and whether retention
    gets its short try before chain-dp first (``RETENTION_TRY``). Segments are counted once,
    and not where the strided recursions are all chain-dp runs (the count builds O(n^2)
    tables: 0.03 s at 512 layers, 0.12-0.15 s at 1024, cold)."""
    if not method_applies("chain-dp", graph):
        return None, False
    layers, chain = len(graph.forward_nodes) - 1, chain_of(graph)
    if strided_only(chain):  # its strided recursions: after retention (in a thread), or first
        return layers <= LONG_CHAIN, False
    if layers > max(CHAIN_DP_MAX[0], LONG_CHAIN):
        return None, False
    segments = distinct_segments(chain)
    if segments > CHAIN_DP_MAX[1]:
        return None, False
    after = CHAIN_DP_FIRST[0] < layers <= CHAIN_DP_MAX[0] or segments > CHAIN_DP_FIRST[1]
    return after, not after and segments > RETENTION_TRY[0]


def _long_chain(graph: RematGraph, after: bool | None) -> bool:
    """Whether ``graph`` is a chain past ``LONG_CHAIN`` layers on which chain-dp, first, runs
    only its strided recursions (in C): there no least-peak schedule is recorded and no floor
    searched (``_floor``), and auto's bound gets most of the time (``LONG_BOUND_SHARE``)."""
    return after is False and LONG_CHAIN > 0 and len(graph.forward_nodes) - 1 > LONG_CHAIN


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    start = time.perf_counter()
    if options.time_limit is None:
        options = replace(options, time_limit=DEFAULT_TIME_LIMIT)
    if options.progress is not None:  # the methods report through auto's own progress
        options = replace(options, progress=Progress(options.progress, start))
    deadline = start + options.time_limit
    after, retention_first = _chain_dp_order(graph)
    tried = _retention_try(graph, budget, options) if retention_first else []
    proven = any(r.status == "optimal" for r in tried)
    floor = None if proven else _floor(graph, budget, options, after)
    if floor is not None:
        return _below_floor(graph, budget, floor, options, start, _long_chain(graph, after))
    ahead = Ahead(graph, budget, deadline) if after and not interrupt.requested() else None
    try:
        return _run_methods(graph, budget, options, start, deadline, after, tried, ahead)
    finally:
        if ahead is not None:
            ahead.stop()


def _retention_try(graph: RematGraph, budget: float, options: SolveOptions) -> list[Solution]:
    """Retention with ``RETENTION_TRY[1]`` seconds, before chain-dp (``_chain_dp_order``):
    where it proves its schedule, chain-dp's persistent recursion (heterogeneous linear(256)
    at 30% of its budget range: 1.45 s of a 1.74 s call under cProfile) never runs. [its
    result]."""
    seconds = min(RETENTION_TRY[1], options.time_limit / 10)
    return [_run("retention", graph, budget, replace(options, time_limit=seconds))]


def _run_methods(graph: RematGraph, budget: float, options: SolveOptions, start: float,
                 deadline: float, after: bool | None, tried: list[Solution],
                 ahead: Ahead | None = None) -> Solution:
    """The methods of ``candidate_methods`` in turn (module docstring; ``after``: chain-dp's
    place), after the results ``tried`` before them, then the result. While ``ahead``
    (chain-dp's recursion in a thread) runs, retention gets one thread: no search beside its
    own (``retention._helpers``) on the core the recursion holds."""
    known, proved = None, None  # auto's own bound: proved before the first method needing it
    results: list[Solution] = list(tried)
    methods, long = _methods(graph, after), _long_chain(graph, after)
    proof = None  # chain-dp's schedule stands: the rest of the time goes to the bound
    for k, name in enumerate(methods):
        if proof is not None and name not in CLASSIC:
            continue
        # exact methods start from the best schedule so far instead of rerunning the baselines
        best = _cheapest(results)
        if interrupt.requested() or (long and past(deadline)):
            break  # Ctrl-C; on such chains no method takes milliseconds (checkpoint-all: 1.1 s)
        if known is None and name not in BEFORE_BOUND:
            proved = _long_bound(graph, budget, deadline, options.time_limit,
                                 options.threads) if long else \
                retention_bound(graph, budget, bound_time(options.time_limit), options.threads)
            known = proved.value
            _bounded(options, known)
        if long and name == "retention" and (best is None or not (proved.kept_solved or
                                                                  proved.kept_rounded)):
            continue
        if best is not None and meets(best.compute_cost, _bound(known, results),
                                      options.mip_rel_gap):
            break  # a bound already proves it: slower methods cannot do better
        limit = _share(name, deadline - time.perf_counter(), methods[k + 1:])
        if name == "cp-intervals" and (limit < CP_LEAST_SECONDS or
                                       not _search_left(best, known, results, options)):
            continue
        step = replace(options, initial=best, time_limit=limit)
        if name == "retention" and ahead is not None and ahead.running():
            step = replace(step, threads=1)
        results.append(_run(name, graph, budget, step))
        if not long:  # there chain-dp's strided schedules leave retention its turn
            proof = proof or _proof_left(results[-1], methods[k + 1:])
        if proof == "now":
            break
    if proof is not None or (known is not None and not long):
        known = _bound_left(graph, budget, known, results, deadline, options.threads,
                            always=proof is not None)
        _bounded(options, known)
    if "cp-intervals" in methods:
        results += _search_after_bound(graph, budget, options, known, results, deadline)
    feasible = [r for r in results if r.feasible]
    if not feasible and not any(r.proven_infeasible for r in results) and not long:
        results += _lowest_left(graph, budget, options, deadline)
        feasible = [r for r in results if r.feasible]
    elapsed = time.perf_counter() - start
    bound = _bound(known, results)
    # the least budget some method met or says it can meet (never above a schedule found)
    met = [r.min_budget for r in results if r.min_budget is not None]
    min_budget = min(met + [r.peak_memory for r in feasible], default=None)
    if not feasible:
        return _none_found(graph, budget, min_budget, results, elapsed)
    best = _cheapest(feasible)
    status = "optimal" if meets(best.compute_cost, bound) else \
        ("timeout" if any(r.status == "timeout" for r in results) else "feasible")
    return best.relabelled(graph, "auto", status, budget, lower_bound=bound, solve_time=elapsed,
                           min_budget=min_budget, chosen=best.method,
                           tried=[r.method for r in results])


def _search_left(best: Solution | None, known: float | None, results: list[Solution],
                 options: SolveOptions) -> bool:
    """Whether ``cp-intervals`` gets its turn: from a schedule the gap leaves open
    (``_gap_open``), where retention's search ran out of time. Where it stalled first, the
    rest goes to the bound (``_bound_left``): U-Net op 50%, 60 s, retention stalls 2.5% above
    the bound after 17.6 s, and the bound, given the time left, proves it within 0.0008%;
    with cp-intervals first (it found the same cost) the bound was left 2.4% below it."""
    cut_short = any(r.method == "retention" and r.status == "timeout" for r in results)
    return cut_short and _gap_open(best, known, results, options)


def _gap_open(best: Solution | None, known: float | None, results: list[Solution],
              options: SolveOptions) -> bool:
    """Whether ``best`` is more than ``CP_GAP`` (or the caller's ``mip_rel_gap``, if larger)
    above the best bound, the condition for ``cp-intervals``."""
    return best is not None and \
        not meets(best.compute_cost, _bound(known, results), max(CP_GAP, options.mip_rel_gap))


def _search_after_bound(graph: RematGraph, budget: float, options: SolveOptions,
                        known: float | None, results: list[Solution],
                        deadline: float) -> list[Solution]:
    """``cp-intervals`` with the time the bound left (at least ``LEFT_SECONDS``), where the
    gap is still open (``_gap_open``): where the search stalled and the bound ended before
    the limit (resnet50 module 30%, 60 s: retention stalls 2.1% above the bound and the call
    ended after 23.6 s), or again from its own schedule where it ran before the bound, unless
    that one is optimal within its copies (``optimal_in_class``: a second run would solve the
    same model, or a restriction of it that holds that optimum). [its result]"""
    best, left = _cheapest(results), _left(deadline)
    if left < LEFT_SECONDS or not _gap_open(best, known, results, options) or \
            any(r.method == "cp-intervals" and r.details.get("optimal_in_class")
                for r in results):
        return []
    return [_run("cp-intervals", graph, budget, replace(options, initial=best,
                                                         time_limit=left))]


def _bound_left(graph: RematGraph, budget: float, known: float | None,
                results: list[Solution], deadline: float, threads: int | None,
                always: bool = False) -> float:
    """``known``, or the bound again with the time left, told the cheapest schedule's cost:
    ``always`` after chain-dp (``_proof_left``), else where every method ended before the
    limit (retention's search stops where it stalls, at least ``LEFT_SECONDS`` left) with the
    cheapest schedule more than ``LEFT_GAP`` above the best bound.
    Its models then get more than their first tenth of the limit: U-Net at op level, 50%,
    60 s: retention stopped after 17.6 s at 1.12517 of the total cost, 2.5% above the bound
    of the first 6 s (1.097199); given 40 s the bound is 1.125161 (its moment model solves
    in 30.7 s)."""
    best = _cheapest(results)
    left = _left(deadline)
    if not always and (best is None or left < LEFT_SECONDS or
                       best.compute_cost <= _bound(known, results) * (1 + LEFT_GAP)):
        return known
    return max(known or -math.inf, retention_bound(graph, budget, max(left, MIN_STEP_SECONDS),
                                                   threads, enough=best.compute_cost).value)


def _long_bound(graph: RematGraph, budget: float, deadline: float, limit: float,
                threads: int | None) -> Bound:
    """Auto's bound on a chain past ``LONG_CHAIN``: ``LONG_BOUND_SHARE`` of the time left less
    its overrun (``LONG_BOUND_OVERRUN``; none where its gaps have one size, as on unit chains:
    HiGHS then gets its knapsack as levels, O(n) nonzeros, ``bounds.LEVELS_GAIN``), where that
    is at least ``bound_time(limit)``; else the trivial bound (every node once)."""
    layers = len(graph.forward_nodes) - 1
    seconds = LONG_BOUND_SHARE * (deadline - time.perf_counter()) - \
        (0.0 if gaps_of_one_size(graph) else LONG_BOUND_OVERRUN * layers ** 2)
    if seconds < bound_time(limit):
        return Bound(float(graph.total_cost), "timeout", 0.0, 0, seconds)
    return retention_bound(graph, budget, seconds, threads)


def _floor(graph: RematGraph, budget: float, options: SolveOptions,
           after: bool | None) -> float | None:
    """``below_floor``'s proven least peak where ``budget`` is below it, else None. On chains
    where chain-dp goes first (in C), a persistent schedule that fits proves the budget
    feasible: its recursion, kept per chain, then answers chain-dp again at once, and the
    least-peak record is not needed (0.55 s of a 1.4 s call on linear(512, unit)). Other
    chains record their least-peak persistent schedule first (``reached``: no floor search).
    Past ``LONG_CHAIN`` layers neither (the least-peak tables are O(n^3), the floor search
    took 9.7 s of 1.5 on linear(4096)): only one node's operands, which the least peak meets
    on every linear(n) measured (up to 2048 layers). ``after``: chain-dp's place
    (``_chain_dp_order``)."""
    if _long_chain(graph, after):
        return below_floor(graph, budget, options.time_limit, search=False)
    if after is False and COMPILED:
        seconds = min(options.time_limit / 4, CHAIN_DP_SECONDS)
        if persistent_fits(chain_of(graph), float(budget) - graph.static_mem,
                           time.perf_counter() + seconds):
            return None
    least = least_peak(graph) if after is not None else None
    if least is not None:  # (None: Ctrl-C stopped it)
        reached(graph, least)
    return below_floor(graph, budget, options.time_limit)


def _below_floor(graph: RematGraph, budget: float, floor: float, options: SolveOptions,
                 start: float, long: bool = False) -> Solution:
    """No schedule fits a budget below the least possible peak (proven); what auto still finds
    is the least budget it can meet: chain-dp's least peak on chains (exact over its class; on
    ``chain_dp.strided_only`` chains its least-peak persistent schedule's, which on linear(n)
    meets one node's operands), else the lower of two: the best baseline's schedule lowered by
    the peak descent, without the min-peak MILP (``min_budget(exact=False)``, which on gpt2 at
    module level spent the whole 30 s of milp's share of each such budget of a sweep without
    lowering it), and, unless that meets the floor, retention's least peak, each in at most half
    the time (fcn_resnet50 at op level, 25%, 15 s each: 22.0 MB by the descent, 19.3 MB by
    retention, before the descent's trade and release moves; with them 16495568 B, 512 B
    above the floor, auto with 30 s, session 40; gpt2 at module level, 20%, and VGG-16 and
    MobileNetV2 at module level, 10%: the descent meets the floor: 3.1-3.4, 0.2 and 4.2 s in
    all, bounds_low_auto.csv). On chains
    past ``LONG_CHAIN`` (``long``) none: there chain-dp has no least-peak schedule, and the
    schedules near the least peak take seconds per simulation (``_lowest_left``)."""
    if long:
        least, tried = None, []
    elif method_applies("chain-dp", graph):
        least, tried = solver("chain-dp")(graph, budget, options).min_budget, ["chain-dp"]
    else:
        deadline = start + options.time_limit
        half = max((deadline - time.perf_counter()) / 2, MIN_STEP_SECONDS)
        lowest = min_budget(graph, replace(options, time_limit=half), exact=False)
        least, tried = lowest.peak_memory, ["min_budget"]
        if lowest.status != "optimal":  # else it meets the floor: nothing is lower
            left = max(min(deadline - time.perf_counter(), half), MIN_STEP_SECONDS)
            found = solver("retention")(graph, budget, replace(options, time_limit=left))
            least, tried = min(least, found.min_budget or math.inf), tried + ["retention"]
    floor = max(floor, known_floor(graph))  # min_budget may have searched it further
    return Solution.infeasible(graph, "auto", budget, least, floor=floor, proven=True,
                               solve_time=time.perf_counter() - start, tried=tried)


def _lowest_left(graph: RematGraph, budget: float, options: SolveOptions,
                 deadline: float) -> list[Solution]:
    """No schedule found and nothing proven: the time left (``LOWEST_LEFT_SECONDS`` or more)
    goes to the least peak (``min_budget`` without its MILP: the best baseline lowered by the
    peak descent), as a schedule if it fits, else as the least budget auto reports. gpt2 at
    op level, 20% (30 s): retention (15 s) and lp-rounding (which auto ran then) find
    nothing, and their least budget is 3628040 B; the 5 s left reach 3254280 B. Not on
    chains past ``LONG_CHAIN`` (``_run_methods``), where the schedules near the least peak
    recompute O(n^2) nodes: on heterogeneous linear(2048) at its least peak it took 55.6 s
    of the 7.5 s left and found none. Its descent stops once the peak fits the budget
    (``min_budget``'s ``enough``): lower peaks only cost more."""
    left = _left(deadline)
    if left < LOWEST_LEFT_SECONDS:
        return []
    lowest = min_budget(graph, replace(options, time_limit=left), exact=False, enough=budget)
    if lowest.peak_memory <= budget:
        return [Solution.from_schedule(graph, lowest.R, lowest.S, "min_budget", "feasible",
                                       budget, solve_time=lowest.solve_time)]
    return [Solution.infeasible(graph, "min_budget", budget, lowest.peak_memory,
                                solve_time=lowest.solve_time)]


def _none_found(graph: RematGraph, budget: float, min_budget: float | None,
                results: list[Solution], elapsed: float) -> Solution:
    """No method found a schedule: proven infeasible only where an exact method proved it
    (milp's model infeasible, or the budget below the least peak); otherwise ``reason`` says
    it proves nothing (random_dag(20, seed=1) 3% of the way from its pebbling floor to
    checkpoint-all's peak: nothing found in 4 s, and no proof either)."""
    tried = [r.method for r in results]
    if any(r.proven_infeasible for r in results):
        return Solution.infeasible(graph, "auto", budget, min_budget, solve_time=elapsed,
                                   proven=True, tried=tried)
    return Solution.infeasible(graph, "auto", budget, min_budget, solve_time=elapsed,
                               reason=NONE_FOUND, tried=tried)


def _proof_left(result: Solution, later: list[str]) -> str | None:
    """Whether the rest of the time goes to the bound after ``result``: "now" when it is chain-dp's
    best over its whole class (its search finished), only a bound is missing and no exact MILP
    follows (milp runs on chains of up to 39 layers). The methods after it (retention, and
    lp-rounding, which auto then ran) have not found a cheaper schedule on any chain measured
    (the class equals milp's optimum wherever milp proved one, ``chain_dp``'s docstring), so the
    time is for the bound: on heterogeneous linear(64) at 30% the moment model proves chain-dp's
    schedule in 11 s, and auto (30 s: chain-dp 10, then retention and lp-rounding) ended
    unproven. "after baselines" when chain-dp, first, found a schedule but did not finish its
    class (its share ran out: chains at their least peak): the classic baselines (milliseconds)
    still run, retention does not (it was never chosen after chain-dp in the chain benchmark
    files); linear(384, unit) at its least peak: retention's 18 s found chain-dp's cost, and the
    bound unproven at 30.4 s; the bound, given the 18.7 s left after the baselines, proves it
    optimal (28.1 s in all; bench/results/fast_notes.md, session 19). None otherwise."""
    if result.method != "chain-dp" or "milp" in later or not result.feasible:
        return None
    if result.status != "optimal" and result.details.get("optimal_in_class"):
        return "now"
    return "after baselines" if "retention" in later and result.status != "optimal" else None


def _share(name: str, left: float, later: list[str]) -> float:
    """The seconds method ``name`` gets of the ``left`` in auto's time limit: half when a
    method of ``HALF_BEFORE`` follows, or when retention goes before the baselines (on chains:
    at 10% of heterogeneous linear(1024)'s range its 30 s found 3.51 of the total cost,
    chen-greedy 1.27 in 2 s), else all of it; chain-dp, when any method follows, half and at
    most ``CHAIN_DP_SECONDS``; cp-intervals, last, half: it searches to its limit unless it
    meets the bound, and the rest goes to the bound (``_bound_left``); but retention gets all
    of it where cp-intervals alone follows and would get less than ``CP_LEAST_SECONDS`` (its
    half of retention's half): the 1 s sweep, seeds 0-2, 3 rows lower, none higher (fcn_resnet50
    op 80% 1.0230-1.0354 -> 1.0082-1.0121 of the total cost; bench/results/fast_notes.md,
    session 44); never less than ``MIN_STEP_SECONDS``, so that the fast baselines always
    run."""
    share = left / 2 if any(m in HALF_BEFORE for m in later) or name == "cp-intervals" or (
        name == "retention" and later) else left
    if name == "retention" and later == ["cp-intervals"] and \
            _share("cp-intervals", left / 2, []) < CP_LEAST_SECONDS:
        share = left
    if name == "chain-dp" and later:
        share = min(left / 2, CHAIN_DP_SECONDS)
    return max(share, MIN_STEP_SECONDS)


def _left(deadline: float) -> float:
    """Seconds until ``deadline``, 0 once Ctrl-C asked auto to stop (``interrupt.requested``,
    as ``base.past`` reads it): what is left then goes to nothing."""
    return 0.0 if interrupt.requested() else deadline - time.perf_counter()


def _bound(known: float | None, results: list[Solution]) -> float:
    """The best lower bound proved: auto's own (if proved yet) or any method's (an infeasible
    result's is the sum of costs, which every bound is at least); -inf before any (Ctrl-C
    before the first method ended)."""
    return max([r.lower_bound for r in results] + ([] if known is None else [known]),
               default=-math.inf)


def _cheapest(results: list[Solution]) -> Solution | None:
    return min((r for r in results if r.feasible), default=None,
               key=lambda r: (r.compute_cost, r.peak_memory))


class Progress:
    """auto's progress, to the caller's ``options.progress``: the cheapest schedule and the
    best bound found so far, the seconds since auto started and where the news comes from
    (``"method"``: "bound", or a method), on each event of the method running (cp-intervals'
    and milp's incumbents), when it ends (``_run``) and when auto proves a bound
    (``_bounded``). Without it the events were each method's own, with its own clock (two
    cp-intervals runs printed 1.8 s, then 1.5 s, late in a 20 s call), and nothing came
    while the others ran."""

    def __init__(self, report, start: float):
        self.report, self.start = report, start
        self.best, self.bound, self.method = math.inf, -math.inf, None

    def __call__(self, event: dict) -> None:
        self.best = min(self.best, event.get("incumbent", math.inf))
        self.bound = max(self.bound, event.get("bound", -math.inf))
        self.send()

    def send(self) -> None:
        finite = math.isfinite(self.best) and math.isfinite(self.bound) and self.best > 0
        gap = max(0.0, (self.best - self.bound) / self.best) if finite else math.inf
        self.report({"incumbent": self.best, "bound": self.bound, "gap": gap,
                     "time": time.perf_counter() - self.start, "method": self.method})


def _run(name: str, graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    """Method ``name``, and its result in auto's progress (``Progress``), if reported."""
    progress = options.progress if isinstance(options.progress, Progress) else None
    if progress is not None:
        progress.method = name
    result = solver(name)(graph, budget, options)
    if progress is not None:
        progress.best = min(progress.best, result.compute_cost if result.feasible else math.inf)
        progress.bound = max(progress.bound, result.lower_bound)
        progress.send()
    return result


def _bounded(options: SolveOptions, known: float | None) -> None:
    """A bound auto proved, to its progress (``Progress``), if reported."""
    if isinstance(options.progress, Progress) and known is not None:
        options.progress.method = "bound"
        options.progress({"bound": known})
