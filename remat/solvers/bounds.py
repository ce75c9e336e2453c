"""A lower bound on the least compute cost within a budget, for graphs of thousands of nodes.

The retention bound. Look at one moment of every schedule: stage t computing node t (the
last computation of stage t, DESIGN.md). At that moment node t's output and all its inputs
are alive and its workspace is held, so memory is at least ``static + m_t + w_t +
sum m_deps(t)`` plus every other value that happens to be alive. Now take a value v and a
*gap* of v: the stages strictly between two consecutive reads of v (its computation counting
as the first), say after read r and before read r'. If v is not alive at the moment of some
stage s in the gap, then node r' (stage r' > s) needs a copy of v computed after that moment
and before r': a computation of v inside (s, r'], and distinct gaps give distinct
computations, none of them the first (which is in stage v). So every
schedule within the budget defines a set K of gaps "v alive at every moment of it" such that

    for every t:  sum_{gaps of v in K covering t} m_v
                      <=  budget - static - m_t - w_t - sum m_deps(t),

and pays at least ``total_cost + sum_{gaps not in K} c_v``. The least such price over all K is
therefore a lower bound on every schedule's cost: a 0/1 knapsack with one row per stage and
one column per gap (O(edges) variables, against Checkmate's O(T^2) + FREE), which HiGHS solves
or bounds in seconds where the full MILP's LP relaxation does not finish. Any proven dual
bound of this small MILP is still a valid bound, so a time limit never makes it wrong. (One
column per value for all its gaps at once, paying c_v once, gives a bound never higher: per
gap, each rebuild is charged, e.g. a U-Net skip dropped across the bottleneck and again
between its backward reads: tiny U-Net at op level, 60%: 1.0026 -> 1.064 of the total cost.)

What it ignores, and so where it is weak: recomputing v needs v's inputs alive at that time,
which may force further recomputation (chains at tight budgets pay p(n, s) > n - s). The
rebuild rows (``_gap_model``) add it: an input whose last read comes before v is dropped
must be kept longer or recomputed as well (first with one row per gap, O(T), then with one
per stage of the gap, then, on models of up to ``CHAINED_COLUMNS`` columns, the inputs that
rebuild needs in turn; each model is solved in the time left and the best bound counts).
Gaps charge one computation per dropped gap; a cascade (a chain at a tight budget rebuilds
the same checkpoint several times within one gap) costs more. The moment model
(``_moment_model``, up to ``MOMENT_COLUMNS`` columns) charges every computation: per value
and stage, kept into the next stage or not, computed again in that stage or not; before it is
solved, what its rows force is fixed (``_forced``, bound propagation, up to
``FORCED_COLUMNS``), and the price of the computations forced is a bound by itself (at a unit
chain's least peak, the optimum). These
ignore the memory at the moment of a recomputation; the last model, the moment model with
``_recompute_rows``, counts it, but is slow and runs only on small graphs where a caller
holds a schedule the others do not meet (chain-dp at tight budgets). The gap models are
tight when the optimum recomputes each dropped value once from values that are alive anyway
(cheap activations next to checkpoints), the common case at moderate budgets; the moment
model also where values are rebuilt more than once (chains, U-Net's first convolution).
"""
from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, replace

import numpy as np

from remat.graph.core import RematGraph
from remat.solvers import highs_backend, interrupt
from remat.solvers.base import time_left


@dataclass(frozen=True)
class Bound:
    """A proven lower bound on the compute cost of any schedule within ``budget``
    (``math.inf``: no schedule fits) and how it was found."""

    value: float
    status: str  # "optimal" (every model solved, or the bound met ``enough``) | "timeout" (a
    # dual bound) | "infeasible"
    seconds: float
    columns: int
    limit: float | None = None  # the time limit it ran under
    kept: frozenset[int] | None = None
    """The gaps (indices into ``gaps(graph)``) the knapsack's best solution (or its LP optimum
    rounded down, ``kept_rounded``) keeps alive: where a schedule can start (``retention``);
    None where it has no solution."""
    recompute_skipped: bool = False
    """The recompute model applied but was not run (no ``enough``): a call with a schedule
    this bound does not meet solves again."""
    kept_solved: bool = False
    """``kept`` is the optimum of its knapsack, not the best solution of one cut short (which
    on heterogeneous linear(2048) kept one gap of 2048)."""
    kept_rounded: bool = False
    """``kept`` is the LP relaxation's optimum rounded down (``_relaxed``), or a 0/1 solution
    that keeps at least as much: near the knapsack's optimum where the LP is nearly integral, as
    on chains."""
    settled_for: float | None = None
    """The cost (``enough``) a model settled against (``SETTLE_SHARE``): for a lower cost it
    may have gone on and risen further, so a call with one solves again."""
    other_kept: tuple[frozenset[int], ...] = ()
    """Where ``kept`` is a 0/1 solution of a knapsack (not the LP's rounded down): other
    solutions, where a schedule can start as well (``retention._held_bound`` tries them after
    ``kept``). First, where ``kept`` was solved, those found after it (solved ones it
    replaced, later ones cut short; the latest first). A later model's
    solution cut short no longer replaces a solved one; either may be the cheaper start. In
    auto with 1 s: random_dag(500) at 50%, the first model's solved one leads to 1.070069 of the
    total cost (proven optimal), where the staged model's cut short did not; gpt2 at module
    level, 50%, the chained model's cut short leads to 1.050801, the solved one to 1.060900
    (bench/results/fast_notes.md, session 33). Then the last ``INCUMBENTS`` improving
    solutions of each gap model's HiGHS solve (the latest first): which of two nearly equal
    knapsack solutions a time limit cuts at moves retention's result more than its search
    does. gpt2 at op level, 30%: the staged model's solution after 0.11 s leads to 1.2002 of
    the total cost after the hold pass, its last to 1.2181; a 12-layer GPT-2 at op level,
    20%: one found after 2.3 s to 1.1843, one after 9.4 s to 1.2275 (session 38)."""


INCUMBENTS = 5
"""The improving solutions of each gap model's solve (its last ones) that ``Bound.other_kept``
keeps as starts: HiGHS found 1-4 per model on the rows traced (session 38)."""

PROVEN_RTOL = 1e-7
"""A schedule within this relative distance of a proven bound counts as proven optimal (float
sums of per-node costs, and HiGHS's own tolerances, differ from exact arithmetic by less)."""
STAGED_COLUMNS = 100_000
"""The most per-stage columns (y) the rebuild rows of ``_gap_model`` add; past it a gap keeps
only its first-stage rows."""

CHAINED_COLUMNS = 20_000
"""The largest model (columns) with the rows that make rebuilding transitive (``chained`` in
``_gap_model``) that is solved; they can multiply the columns by 50 (random_dag(250): 2594 ->
120090, 6-18 s instead of 0.3 s, for the same bound), and raised the bound only on small
graphs here (gpt2 op 40%: 1.0498 -> 1.0871 in 1.3 s)."""

SETTLE_SHARE = 0.001
"""Told the cost of a schedule (``enough``), a model stops once its incumbent is within this
share of the distance from its proven bound to that cost (``highs_backend.run``'s ``settle``):
its optimum is then below the cost, so it cannot prove the schedule, and going on would raise
the bound by at most 0.1% of the gap left. The next models get the time. fcn_resnet50 at op
level, 50%, 60 s: retention stopped within 1% of the bound and auto's bound, told its cost,
got the 25.3 s left; one of its models was within 0.1% of that distance after 1.3 s, then
searched on and took 30.7 s of its 23.5 (HiGHS checked neither its limit nor its interrupt
for 18 s): the call took 65.4 s, now 36.3 s, for a bound lower by 1e-6 of the total cost;
resnet50 at op level, 30%: 51.2 -> 35.7 s. At 1% the gap model of linear(192) settled
before it was solved, and the bound ended 0.0005 of the total cost lower (bench/results/
fast_notes.md, sessions 28 and 30)."""

MOMENT_COLUMNS = 70_000
"""The largest moment model (``_moment_model``) that is solved after the gap models, counted
by ``moment_size`` (two columns per stage each value spans): it grows with the square of those
spans (linear(128): 65792, proving chain-dp optimal at its smallest budget in
1.5 s in bench/results/bounds_chains.csv; random_dag(100): 40200; U-Net at op level: 11990;
resnet50 at module level: 70490; fcn_resnet50 at op level: 179504)."""


MOMENT_CHAIN_COLUMNS = 600_000
"""``MOMENT_COLUMNS`` on chains (``RematGraph.is_chain``), whose moment models solve fast and
are what proves a chain at its least peak: linear(192, unit) (147840) and linear(256, unit)
(262656) there, proven optimal by auto in 3.6-3.9 and 7.7-7.9 s (bench/results/fast_notes.md,
session 16; with the general cap their bound stayed at 1.50 of the total cost, against 48.1
and 64.1), linear(384, unit) (590592) solved in 15.8 s (session 19). linear(512, unit)
(1049600) took 35 s and 3.1 GB there. Not the cap of every graph: with 300000 for all, auto
on the six zoo and random graphs it lets in (70490-250500 columns), at 40/60/80%, got the
costs of its rows in bench/results/bounds.csv, bounds higher by at most 3.2e-5 of the total
cost, and took up to 8 s longer (random_dag(250): 4.8 / 3.2 / 2.7 s there, 13.1 / 10.4 / 9.8
s; session 17)."""

MOMENT_SECONDS_PER_COLUMN = 1.5e-5
"""The least time left, per column (``moment_size``), in which the moment model is started:
HiGHS checks its time limit before the root LP but not within it, so a model started late
runs past the limit by the root's solve. With 0.5 s (one-off `/tmp/s19/hb2.py`, heterogeneous
chains at 10% of their budget range, no feasibility jump): linear(192) (147840 columns)
returned after 1.2 s, linear(256) (262656) after 2.7 s, and with 1 s linear(384) (590592)
after 7.8 s; auto's first bound, a tenth of its limit, would so run 2-7 s over."""

FORCED_COLUMNS = 2_500_000
"""The largest moment model (``moment_size``) built for the computations its rows force
(``_forced``), solved by HiGHS only where what is left of it is within ``MOMENT_COLUMNS``
(``MOMENT_CHAIN_COLUMNS``): linear(512, unit) (1049600) at its least peak, where the forced
computations are the optimum, 128.13 of the total cost, in 2.8 s (0.6 s to build, 2.2 s to
propagate; the solve of the whole model took 35 s and 3.1 GB; bench/results/fast_notes.md,
session 21); linear(768, unit) (2360832 columns): auto proves its least peak in 24 s, 1.97 GB
at most (session 22). linear(1024, unit) (4196352) takes 39 s of a 60 s limit and 3.6 GB:
left out."""

FORCED_SECONDS_PER_COLUMN = 4e-6
"""The least time left, per column, in which the forced computations are looked for (2.8 s
for the 1047553 columns above; 3.7 s before the rows were looked at again only where a
fixing can tighten them)."""

RECOMPUTE_COLUMNS = 5_000
"""The largest graph (``moment_size``) on which the moment model with recomputation rows
(``_recompute_rows``) is solved. They multiply its columns by 3.5 and leave its LP relaxation
where it was, so only small models finish: linear(16) (1056) at chain-dp's smallest budget is
proven optimal in 1.4 s in bench/results/bounds_chains.csv (the moment model: 1.1935 of the
total cost, chain-dp 1.2215); linear(32) (4160) there by chain-dp with a 120 s limit, in
99 s (1.1848 -> 1.2012, chain-dp's cost); on the zoo graphs up to gpt2 at op level (15280)
it raised no bound in 20 s (bench/results/fast_notes.md, session 9)."""


def meets(cost: float, bound: float, gap: float = 0.0) -> bool:
    """True when ``cost`` is within relative ``gap`` of the proven ``bound`` (gap 0: proven
    optimal), up to ``PROVEN_RTOL``."""
    return cost <= bound * (1 + gap) * (1 + PROVEN_RTOL)


_CACHE: "weakref.WeakKeyDictionary[RematGraph, dict[float, Bound]]" = weakref.WeakKeyDictionary()


def bound_time(time_limit: float | None) -> float:
    """Seconds a solver gives the retention bound: a tenth of its limit (the knapsack is
    small, O(T) variables, and usually solves in well under a second)."""
    return 10.0 if time_limit is None else max(0.5, 0.1 * time_limit)


def peak_lower_bound(graph: RematGraph) -> float:
    """No schedule peaks below this: computing node k needs its inputs alive, its output
    allocated and its workspace held, so ``static_mem + m_k + w_k + sum of its inputs' m`` is
    a candidate of every schedule."""
    return graph.static_mem + float(operands(graph).max())


MODELS = ("first", "staged", "chained", "moment", "recompute")
"""The models ``retention_bound`` solves in turn, each in the time the ones before left: the
gap knapsack with first-stage rebuild rows, with per-stage ones (``STAGED_COLUMNS``), with
chained ones (``CHAINED_COLUMNS``), the moment model (``MOMENT_COLUMNS``, on chains
``MOMENT_CHAIN_COLUMNS``), then the moment
model with the memory at each recomputation (``RECOMPUTE_COLUMNS``; only for a caller that
holds a schedule the others do not meet: ``enough``). Each is valid alone; the best bound
counts."""


def retention_bound(graph: RematGraph, budget: float, time_limit: float | None = 10.0,
                    threads: int | None = None, models: tuple[str, ...] = MODELS,
                    enough: float | None = None) -> Bound:
    """The retention bound (module docstring) of ``graph`` within ``budget`` total bytes, from
    ``models`` (a subset of ``MODELS``). ``enough``: the cost of a schedule the caller holds;
    the models stop as soon as the bound meets it (it is then the optimum, status "optimal").
    Cached per graph and budget (graphs are frozen) when all models are asked for; a cached
    bound is recomputed only when it ran out of time and more time is asked for, or when it
    skipped the recompute model and ``enough`` is more than it; the higher of the two counts.
    With ``enough`` the models run without HiGHS's root reduced-cost heuristic
    (``highs_backend.ROOT_HEURISTIC``), which can run seconds past the time limit: such a
    caller wants the bound within its limit more than solutions (auto's last bound, 60 s, a
    12-layer GPT-2 at op level, 30%: its staged model given 11.3-11.4 s took 13.4-14.1 s with
    it, 11.5 s without, with the same bound, and the call 62.5 -> 60.7 s; bench/results/
    fast_notes.md, session 34). Without ``enough`` they run with it, as before: their
    solutions, even cut short, are where ``retention`` starts (a bound cached from a call
    with ``enough`` still gives it its starts)."""
    if set(models) - set(MODELS):
        raise ValueError(f"unknown bound models {sorted(set(models) - set(MODELS))}; "
                         f"choose from {MODELS}")
    if tuple(models) != MODELS:
        return _retention(graph, float(budget), time_limit, threads, models, enough)
    known = _CACHE.setdefault(graph, {})
    hit = known.get(float(budget))
    if hit is not None and _reusable(hit, time_limit, enough):
        return hit
    found = _retention(graph, float(budget), time_limit, threads, models, enough)
    if hit is not None and hit.value > found.value:
        found = replace(found, value=hit.value)
    if not interrupt.requested():  # cut short by Ctrl-C: not what its limit would give
        known[float(budget)] = found
    return found


def _reusable(hit: Bound, time_limit: float | None, enough: float | None) -> bool:
    if enough is not None and meets(enough, hit.value):
        return True  # it proves the caller's schedule optimal
    if enough is not None and hit.recompute_skipped:
        return False  # the recompute model may close the caller's gap
    if enough is not None and hit.settled_for is not None and enough < hit.settled_for:
        return False  # a model stopped short of where this cost would have let it go
    limit = math.inf if hit.limit is None else hit.limit  # a settle without a time limit
    return hit.status != "timeout" or (time_limit or math.inf) <= limit


def forget_bounds(graph: RematGraph) -> None:
    """Drop the bounds cached for ``graph`` (benchmarks: each method then pays for its own)."""
    _CACHE.pop(graph, None)


def _retention(graph: RematGraph, budget: float, time_limit: float | None,
               threads: int | None, models: tuple[str, ...], enough: float | None) -> Bound:
    start = time.perf_counter()
    room = stage_room(graph, budget)
    if (room < 0).any():
        return Bound(math.inf, "infeasible", time.perf_counter() - start, 0, time_limit)
    columns = gaps(graph)
    total = float(graph.total_cost)
    if not columns:
        return Bound(total, "optimal", time.perf_counter() - start, 0, time_limit)
    # objective = rebuilds - (cost of the kept gaps); its dual bound is a lower bound on it
    base = total + float(sum(graph.cost[v] for v, _, _ in columns))
    value, status, kept, skipped, solved_kept = total, "optimal", None, False, False
    rounded = False  # kept is the LP optimum rounded down, or keeps at least as much
    others: list[frozenset[int]] = []  # solutions beside kept that retention tries too
    incumbents: list[frozenset[int]] = []  # the gap models' improving solutions
    settled = None  # the cost a model settled against
    size = moment_size(graph) if {"moment", "recompute"} & set(models) else 0
    solved: set[tuple[int, bool]] = set()  # what each gap model solved added to the first

    for name in models:
        left = time_left(time_limit, start, 0.0)  # (0 once Ctrl-C asked to stop)
        if left is not None and left <= 0:
            status = "timeout"  # a later call with more time solves the rest
            break
        if name == "moment":
            cap = MOMENT_CHAIN_COLUMNS if graph.is_chain else MOMENT_COLUMNS
            forcing = _forces(graph, room, size)
            if size > cap and not forcing:
                continue  # too large
            if left is not None and left < size * (FORCED_SECONDS_PER_COLUMN if forcing else
                                                   MOMENT_SECONDS_PER_COLUMN):
                status = "timeout"  # it would not stop in time: a later call with more time
                continue
            model, forced = _forced_moment(graph, room) if forcing else \
                (_moment_model(graph, room), 0.0)
            if forcing and model is not None:  # the price of the computations it forces
                value = max(value, _safe(graph, total + forced + _least_price(model)))
                if enough is not None and meets(enough, value):
                    status = "optimal"
                    break  # they are the optimum
                left = time_left(time_limit, start, 0.0)
                size_left = len(model["cost"])
                if size_left > cap or size_left == 0:  # too large, or solved by the fixing
                    continue
                if left is not None and left < size_left * MOMENT_SECONDS_PER_COLUMN:
                    status = "timeout"
                    continue
            offset, gap_columns = total + forced, None
        elif name == "recompute":
            if size > RECOMPUTE_COLUMNS:
                continue
            if enough is None:  # slow: only to close a known gap
                skipped = True
                continue
            model = _moment_model(graph, room, budget - graph.static_mem)
            offset, gap_columns = total, None
        else:
            staged = 0 if name == "first" else STAGED_COLUMNS
            gap, extra, gap_columns = _gap_model(graph, columns, room, staged,
                                                 name == "chained")
            if extra in solved:
                continue  # the same model as one solved before (linear chains: all three)
            solved.add(extra)
            offset = base
            if gap is not None and gap.relaxed_first():
                relaxed = _relaxed(gap, left, threads)
                value = max(value, _safe(graph, offset + relaxed.bound))
                if relaxed.status == "optimal" and kept is None:
                    kept, rounded = _rounded_down(relaxed.x, gap_columns), True
                if enough is not None and meets(enough, value):
                    status = "optimal"
                    break  # the optimum
                left = time_left(time_limit, start, 0.0)
                if left is not None and left <= 0:
                    status = "timeout"
                    break
            model = None if gap is None else gap.arrays()
        if model is None:
            continue  # too large
        target = None if enough is None else enough / (1 + PROVEN_RTOL / 2) - offset
        improved: list[np.ndarray] = []  # this model's improving solutions
        collect = None if gap_columns is None else improved.append
        result = highs_backend.run(model, time_limit=left, threads=threads, bound_at=target,
                                   settle=SETTLE_SHARE,
                                   jump=_jumps(graph, gap_columns is not None),
                                   reduced_cost=enough is None,  # told a cost: the limit
                                   solutions=collect)
        if result.status == "infeasible":  # cannot happen: keep nothing, rebuild every input
            raise AssertionError(f"retention bound: the {name} model is infeasible")
        value = max(value, _safe(graph, offset + result.bound))
        incumbents += [_kept_in(x, gap_columns) for x in improved[-INCUMBENTS:]]
        if gap_columns is not None and result.x is not None:
            found = _kept_in(result.x, gap_columns)
            optimal = result.status == "optimal"
            # kept: a later model's solution where it is solved, or kept is cut short too, or
            # kept is the LP's rounded down and it keeps as much; a solved kept stays a start
            if optimal or not (solved_kept or rounded) or (
                    rounded and
                    _kept_cost(graph, columns, found) >= _kept_cost(graph, columns, kept)):
                if solved_kept:
                    others.append(kept)  # replaced by a later one solved: a start as well
                kept, solved_kept, rounded = found, optimal, rounded and not optimal
            elif solved_kept:
                others.append(found)  # cut short after a solved one: a start as well
        if enough is not None and meets(enough, value):
            status = "optimal"  # even after a model that settled
            break  # the bound is the optimum: nothing higher exists
        if result.status != "optimal":
            status = "timeout"
            if result.status != "settled":
                break  # out of time; a settled model leaves the rest to the next ones
            settled = enough
    if rounded:  # beside the LP's kept, nothing (a solution cut short can keep 1 gap of 2048)
        incumbents = []
    others = [k for k in others[::-1] + incumbents[::-1] if k != kept]  # the latest first
    return Bound(value, status, time.perf_counter() - start, len(columns), time_limit, kept,
                 skipped, solved_kept, rounded, settled, tuple(dict.fromkeys(others)))


def _kept_in(x: np.ndarray, gap_columns: list[int]) -> frozenset[int]:
    """The gaps a 0/1 solution of a gap model keeps (indices into ``gaps``)."""
    return frozenset(np.flatnonzero(x[np.asarray(gap_columns, dtype=np.int64)] > 0.5).tolist())


def _rounded_down(x: np.ndarray, gap_columns: list[int]) -> frozenset[int]:
    """The gaps an optimal LP solution keeps whole: dropping the fractional ones keeps every
    memory row within its room (not every rebuild row: the kept gaps are where retention's
    schedule starts, not a bound)."""
    return frozenset(k for k, col in enumerate(gap_columns) if x[col] > 1 - 1e-6)


def _kept_cost(graph: RematGraph, columns: list[tuple[int, int, int]],
               kept: frozenset[int]) -> float:
    """The recomputation a set of kept gaps saves."""
    return float(sum(graph.cost[columns[k][0]] for k in kept))


def _relaxed(gap: "_Model", time_limit: float | None,
             threads: int | None) -> highs_backend.BackendResult:
    """The LP relaxation of a gap knapsack, its memory rows as levels (HiGHS's result: its
    bound is -inf where it is not solved in time). ``_retention`` takes it first where the
    knapsack has several sizes and the levels are much sparser (``_Model.relaxed_first``): a
    bound within a second where the 0/1 program written out takes many. Heterogeneous
    linear(2048) at 10 / 30 / 60% of its budget range: 1.197761 / 1.104018 / 1.036691 of the
    total cost in 0.16-0.17 s (the same LP written out: 4.5 / 3.1 / 2.8 s), where the 0/1
    optima at 10 / 60% are 1.197768 / 1.036717 (10-12 s; bench/results/fast_notes.md, session
    24). The 0/1 program follows in the time left: its solution is where ``retention``
    starts."""
    relaxed = gap.arrays(levels=True)
    result = highs_backend.run(relaxed, time_limit=time_limit, threads=threads, relax=True)
    if result.x is not None:
        result.x = result.x[:len(gap.cost)]  # the knapsack's own columns
    return result


def _jumps(graph: RematGraph, gap_model: bool) -> bool:
    """Whether a model runs HiGHS's feasibility-jump heuristic: the gap models, but not on
    chains; never the moment model (only its bound counts, ``highs_backend.run``). On chains
    the gap knapsack is over nested intervals, and the heuristic took most of the solve:
    heterogeneous linear(512) at 40/60/80%, 1.38/1.24/1.15 s with it, 0.37/0.22/0.20 s without
    (at 60%, 0.9 s of 1.2 s in the heuristic); linear(512, unit) 0.53-0.64 s against 0.12-0.17 s;
    the same optima. On the zoo graphs its solution sometimes closes the gap: fcn_resnet50 at
    op level, 60%, 3.1 s with it, unsolved in 20 s without; resnet50 at module level, 80%, 0.4
    against 4.4 s (mobilenet_v2 at op level, 60%, goes the other way: unsolved in 20 s, 0.9 s
    without). One-off /tmp/s20/jump.py: 40-80% on bench/graphs, random_dag(100-500) and
    linear(128-512), each model with and without."""
    return gap_model and not graph.is_chain


def stage_room(graph: RematGraph, budget: float) -> np.ndarray:
    """Per stage t, the bytes the knapsack may fill while node t runs: the budget less static
    memory and node t's operands (negative: no schedule fits the budget)."""
    return float(budget) - graph.static_mem - operands(graph)


def retained(graph: RematGraph, room: np.ndarray, gap_list: list[tuple[int, int, int]],
             weights: np.ndarray, time_limit: float | None = 10.0,
             threads: int | None = None, mip_rel_gap: float = 0.0) -> set[int] | None:
    """The indices of the gaps in ``gap_list`` (``gaps(graph)``) that a knapsack keeps to
    keep the most ``weights`` (one per gap) within ``room`` (per stage, see ``stage_room``):
    the bound's knapsack with other prices, the ``retention`` method's starting point. Gaps
    of no weight are dropped; solved within the relative ``mip_rel_gap``. None if some room is
    negative or HiGHS found no solution in time. Without HiGHS's feasibility-jump heuristic
    (keeping nothing is a solution already): over the zoo graphs and random_dag(100-500) at
    20/40/60% that have room, four weightings each, 29.7 s instead of 48.5 s, the same
    objectives on 32 of the 33 rows and a better one on the last, whose solves hit their 2 s
    (bench/results/fast_notes.md, session 39)."""
    if (room < 0).any():
        return None
    columns = [k for k in range(len(gap_list)) if weights[k] > 0]
    if not columns:
        return set()
    model = knapsack(graph, room, [gap_list[k] for k in columns], weights[columns])
    result = highs_backend.run(model.arrays(), time_limit=time_limit, threads=threads,
                               mip_rel_gap=mip_rel_gap, jump=False)
    if result.x is None:
        return None
    return {k for k, x in zip(columns, result.x) if x > 0.5}


def knapsack(graph: RematGraph, room: np.ndarray, gap_list: list[tuple[int, int, int]],
             weights: np.ndarray) -> "_Model":
    """``retained``'s model: a column per gap (its weight kept), the gaps' bytes within each
    stage's ``room``."""
    model = _Model(room)
    for (v, first, last), weight in zip(gap_list, weights):
        model.memory_span(first, last, model.column(-float(weight)), float(graph.mem[v]))
    return model


def _close_rebuilds(graph: RematGraph, horizon: dict[int, int]) -> None:
    """Extend ``horizon`` (value -> the last stage a rebuild row asks about it) to the inputs
    a rebuild needs: e, read last before stage t, for each d rebuilt after stage t."""
    todo = list(horizon)
    while todo:
        d = todo.pop()
        for e in graph.deps[d]:
            read_last = max(graph.users[e])
            if graph.mem[e] > 0 and read_last < horizon[d] and horizon.get(e, -1) < horizon[d]:
                horizon[e] = horizon[d]
                todo.append(e)


def _safe(graph: RematGraph, value: float) -> float:
    """``value`` less HiGHS's tolerances, so that they never lift a bound above a true cost;
    with whole-number costs every cost is whole, so the bound rounds up to one. A model stopped
    before HiGHS proved any bound gives -inf, which stays -inf."""
    if math.isfinite(value) and np.all(graph.cost == np.round(graph.cost)):
        return float(math.ceil(value - 1e-6))
    return value * (1 - 1e-9)


def operands(graph: RematGraph) -> np.ndarray:
    """Per node, the bytes alive whenever it is computed: its output, its inputs and its
    transient workspace."""
    mem = graph.mem
    return np.array([mem[t] + graph.workspace[t] + sum(mem[d] for d in graph.deps[t])
                     for t in range(graph.size)], dtype=float)


def runs(graph: RematGraph, v: int) -> list[tuple[int, int]]:
    """The runs of stages (first, last) strictly between two consecutive reads of value v (its
    computation counting as the first read): where v can be dropped."""
    out, previous = [], v
    for reader in sorted(set(graph.users[v])):
        if reader > previous + 1:
            out.append((previous + 1, reader - 1))
        previous = reader
    return out


def gaps(graph: RematGraph) -> list[tuple[int, int, int]]:
    """Every (v, first, last) of a run (``runs``) of a value worth keeping: values free to
    recompute or of no size have none (dropping, resp. keeping, them is optimal)."""
    return [(v, first, last) for v in range(graph.size)
            if graph.cost[v] > 0 and graph.mem[v] > 0 for first, last in runs(graph, v)]


def _gap_model(graph: RematGraph, columns: list[tuple[int, int, int]], room: np.ndarray,
               staged: int, chained: bool = False
               ) -> tuple["_Model | None", tuple[int, bool], list[int]]:
    """The retention knapsack by gaps, plus the inputs a dropped value needs to be rebuilt;
    returns the program, what it adds to the model with first-stage rows only (the number
    of per-stage columns, at most ``staged``, and whether chained rows were added: models
    with equal such pairs are the same) and each gap's column.

    Column x per gap (keep v alive across it; else pay c_v, module docstring). Rebuild rows:
    if v is dropped in the gap starting at stage a, it is computed again after that moment,
    and each input d whose last read comes before a must be alive then. Per such d and stage
    t after last(d): ``b_{d,t}`` (d alive at stage t, any copy: m_d bytes in row t) and
    ``L_{d,t}`` (d computed again after stage t), and per d ``p_d`` (computed again after its
    last read: c_d, once, p_d >= L_{d,t}; a different computation from any counted for d's
    own gaps, which all lie before d's last read). Then x + b_{d,a} + L_{d,a} >= 1 (d alive
    from stage a through v's rebuild, or computed after a), and b_{d,t} <= b_{d,t-1} +
    L_{d,t-1} (alive at t: alive at t-1 or computed in between). They catch e.g. attention's
    q, k, v splits, cheap to drop but only rebuildable from the large QKV product, gone by
    then.

    Per-stage rows (``staged`` > 0): column y_t per stage t of the gap (v alive at stage t,
    m_v bytes in row t instead of x; y_t >= x). If v is not alive at stage t it is computed
    again after t, so y_t + b_{d,t} + L_{d,t} >= 1. Dropping a ReLU's output then frees
    nothing unless the convolution output it is rebuilt from is dropped (and paid for) too:
    VGG-16 at op level, 60%: 1.0010 -> 1.0282, the schedule's cost.

    Chained rows (``chained``): a computation of d after stage t needs each input e read
    last before t alive at that moment, so b_{e,t} + L_{e,t} >= L_{d,t}, down to values that
    are alive anyway. Rebuilding GPT-2's attention probabilities then costs the QK^T product
    they come from unless some 0.5 MiB stays: gpt2 op 40%: 1.0498 -> 1.0871. Returns no model
    (None) when these need more than ``CHAINED_COLUMNS`` columns. Every schedule satisfies
    all these rows, so the bound stays valid.
    """
    model = _Model(room)
    pairs: list[tuple[int, int, int]] = []  # (column, input d, stage t)
    added, gap_columns = 0, []
    for v, first, last in columns:
        col = model.column(-float(graph.cost[v]))
        gap_columns.append(col)
        inputs = [d for d in graph.deps[v] if graph.cost[d] > 0 and graph.mem[d] > 0
                  and max(graph.users[d]) < last]
        pairs += [(col, d, first) for d in inputs if max(graph.users[d]) < first]
        split = max(first, min((max(graph.users[d]) + 1 for d in inputs), default=last + 1))
        if added + last + 1 - split > staged:
            split = last + 1
        added += last + 1 - split
        model.memory_span(first, min(split, last + 1) - 1, col, float(graph.mem[v]))
        for t in range(split, last + 1):
            alive_v = model.column(0.0)  # y: v alive at stage t, at least x
            model.memory(t, alive_v, float(graph.mem[v]))
            model.row([alive_v, col], [1.0, -1.0], 0.0)
            pairs += [(alive_v, d, t) for d in inputs if max(graph.users[d]) < t]
    horizon: dict[int, int] = {}
    for _, d, t in pairs:
        horizon[d] = max(horizon.get(d, 0), t)
    if chained:
        _close_rebuilds(graph, horizon)
        size = 2 * sum(until - max(graph.users[d]) for d, until in horizon.items())
        if size > CHAINED_COLUMNS:
            return None, (added, True), gap_columns
    rebuilt, alive, later = {}, {}, {}
    for d, until in horizon.items():
        rebuilt[d] = model.column(float(graph.cost[d]))
        for r in range(max(graph.users[d]) + 1, until + 1):
            alive[d, r] = model.column(0.0)
            model.memory(r, alive[d, r], float(graph.mem[d]))
            if chained:
                later[d, r] = model.column(0.0)
                model.row([rebuilt[d], later[d, r]], [1.0, -1.0], 0.0)  # p_d >= L[d, r]
            else:  # L[d, r] = p_d: the same bound without chained rows, half the columns
                later[d, r] = rebuilt[d]
            if (d, r - 1) in alive:  # b[d, r-1] + L[d, r-1] >= b[d, r]
                model.row([alive[d, r - 1], later[d, r - 1], alive[d, r]], [1.0, 1.0, -1.0], 0.0)
    for col, d, t in pairs:  # x + b[d, t] + L[d, t] >= 1, y_t + b[d, t] + L[d, t] >= 1
        model.row([col, alive[d, t], later[d, t]], [1.0, 1.0, 1.0], 1.0)
    if chained:  # b[e, t] + L[e, t] >= L[d, t]
        for (d, t), col in later.items():
            for e in graph.deps[d]:
                if (e, t) in later:
                    model.row([alive[e, t], later[e, t], col], [1.0, 1.0, -1.0], 0.0)
    return model, (added, chained and bool(horizon)), gap_columns


def _spans(graph: RematGraph) -> dict[int, int]:
    """The values the moment model tracks (some cost, some size, some reader) and each one's
    horizon H_v: its last read, or later where a value computed from it is tracked later
    (H_v = max(last read, H_w over readers w))."""
    horizon: dict[int, int] = {}
    for v in reversed(range(graph.size)):
        if graph.cost[v] > 0 and graph.mem[v] > 0 and graph.users[v]:
            horizon[v] = max([max(graph.users[v])] +
                             [horizon[w] for w in graph.users[v] if w in horizon])
    return dict(sorted(horizon.items()))


def moment_size(graph: RematGraph) -> int:
    """Two 0/1 columns per stage each tracked value spans: the moment model's columns with
    the recompute rows, an upper bound without them."""
    return 2 * sum(until - v for v, until in _spans(graph).items())


def _moment_model(graph: RematGraph, room: np.ndarray, free: float | None = None) -> dict | None:
    """The moment model: whether each value is kept from one stage into the next, and in which
    stages it is computed again; None where it has no tracked value. ``free`` (the budget less
    static memory): add the memory at each recomputation (``_recompute_rows``).

    For a tracked value v (``_spans``): ``y[v, t]`` for t in [v, H_v] (in memory when stage
    t + 1 starts; m_v bytes in row t, where it is alive while node t runs, unless stage t
    computes or reads v, which the room already counts; those stages have a column only with
    ``free``, else v counts as kept, a relaxation that solved faster on long chains, e.g.
    linear(64) at chain-dp's smallest budget: 1.2215 against 1.2178 after 30 s) and
    ``z[v, t]`` for t in (v, H_v] (computed again in stage t, c_v each). Rows: a stage that
    reads v needs it resident at its start or computed in it (``y[v, t-1] + z[v, t] >= 1``);
    kept into t + 1 needs the same (``y[v, t] <= y[v, t-1] + z[v, t]``); a computation needs
    each input resident at the start of its stage or computed in it (``z[v, t] <= y[d, t-1]
    + z[d, t]``). Each schedule gives a solution (y = S[t + 1], z = R off the diagonal) no
    dearer than itself, so the least price is a lower bound. Unlike the gaps it charges every
    computation, so it sees the cascade of rebuilds in a chain at a tight budget: linear(16,
    unit) at chain-dp's smallest budget, 4.18 of the total, where the gap models give 1.42."""
    horizon = _spans(graph)
    if not horizon:
        return None
    if free is None:
        return _MomentArrays(graph, room, horizon).arrays()
    return _moment_rows(graph, room, horizon, free)


def _forces(graph: RematGraph, room: np.ndarray, size: int) -> bool:
    """Whether ``retention_bound`` looks for the computations the moment model (``size``
    columns, ``moment_size``) forces: up to ``FORCED_COLUMNS``, where it can force any."""
    return size <= FORCED_COLUMNS and _may_force(graph, room)


def _may_force(graph: RematGraph, room: np.ndarray) -> bool:
    """Whether the moment model's rows can force anything (``_forced``): only where some
    tracked value is larger than the room of a stage it spans (its ``y`` column there is 0;
    with none, no row forces a first column). A quick test, so that the model is not built
    for nothing (linear(512) at 10% of its range: 1047553 columns, 2.8 s)."""
    return any(graph.mem[v] > room[v + 1:until + 1].min()
               for v, until in _spans(graph).items() if until > v)


def forcing_time(graph: RematGraph, budget: float) -> float:
    """The seconds ``retention_bound`` needs at ``budget`` for the computations its moment
    model forces (``FORCED_SECONDS_PER_COLUMN`` per column), 0 where it would not look for
    them: a caller whose cost they may meet (chain-dp at a unit chain's least peak) gives its
    first bound that much more."""
    size, room = moment_size(graph), stage_room(graph, budget)
    if (room < 0).any() or not _forces(graph, room, size):  # no bound model runs, or not it
        return 0.0
    return size * FORCED_SECONDS_PER_COLUMN


def _forced_moment(graph: RematGraph, room: np.ndarray) -> tuple[dict | None, float]:
    """The moment model less the columns its rows fix (``_forced``, ``_without_fixed``), and
    the price of those fixed (the computations it forces); None and 0 where it tracks no
    value."""
    model = _moment_model(graph, room)
    if model is None:
        return None, 0.0
    lower, upper = _forced(model)
    if not (lower == upper).any():
        return model, 0.0
    return _without_fixed(model, lower, upper)


def _moment_rows(graph: RematGraph, room: np.ndarray, horizon: dict[int, int],
                 free: float | None) -> dict:
    """``_moment_model`` in Python loops, one column and row at a time (with ``free``; without
    it, the reference the tests compare ``_MomentArrays`` with)."""
    model = _Model(room)
    kept, again = {}, {}
    for v, until in horizon.items():  # (column order matters to HiGHS's speed: keep it)
        readers = set(graph.users[v])
        if free is not None:
            kept[v, v] = model.column(0.0)
        for t in range(v + 1, until + 1):
            if t not in readers:
                kept[v, t] = model.column(0.0)
                model.memory(t, kept[v, t], float(graph.mem[v]))
            elif free is not None:  # else relaxed: kept for free, as alive at node t anyway
                kept[v, t] = model.column(0.0)
            again[v, t] = model.column(float(graph.cost[v]))
    for v, until in horizon.items():
        for t in range(v + 1, until + 1):
            before = kept.get((v, t - 1))
            if before is not None and t in graph.users[v]:
                model.row([before, again[v, t]], [1.0, 1.0], 1.0)
            elif before is not None:
                model.row([before, again[v, t], kept[v, t]], [1.0, 1.0, -1.0], 0.0)
        for t in range(v + 1, until + 1):
            for d in graph.deps[v]:
                if (d, t - 1) in kept:
                    model.row([kept[d, t - 1], again[d, t], again[v, t]], [1.0, 1.0, -1.0],
                              0.0)
    if free is not None:
        stages: dict[int, list[int]] = {}
        for v, t in again:
            stages.setdefault(t, []).append(v)
        for t, values in stages.items():
            _recompute_rows(graph, model, kept, again, t, sorted(values), free)
    return model.arrays()


class _MomentArrays:
    """The moment model without ``free`` in numpy, one value at a time: the same columns and
    rows in the same order as ``_Model`` would hold (tests/test_bounds.py compares them), 8
    to 13 times faster to build (the moment model of linear(384, unit), 589057 columns: 0.36 s,
    3.1 s in loops; bench/results/fast_notes.md, session 19)."""

    def __init__(self, graph: RematGraph, room: np.ndarray, horizon: dict[int, int]):
        self.graph, self.room = graph, room
        self.kept: dict[int, np.ndarray] = {}  # per value: column of y[v, t], t = v + 1.., or -1
        self.again: dict[int, np.ndarray] = {}  # per value: column of z[v, t], t = v + 1..
        self.cost: list[np.ndarray] = []
        self.memory: list[tuple[np.ndarray, np.ndarray, float]] = []  # stages, columns, bytes
        self.entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # rows, cols, vals
        self.lower: list[np.ndarray] = []
        self.count = 0  # columns so far
        self.row_count = 0
        for v, until in horizon.items():
            self._columns(v, until)
        for v, until in horizon.items():
            self._kept_rows(v, until)
            self._input_rows(v, until)

    def _columns(self, v: int, until: int) -> None:
        stages = np.arange(v + 1, until + 1)
        keeps = ~np.isin(stages, self.graph.users[v])  # y only where stage t does not read v
        widths = 1 + keeps
        first = self.count + np.cumsum(widths) - widths
        self.kept[v] = np.where(keeps, first, -1)
        self.again[v] = first + keeps
        cost = np.zeros(int(widths.sum()))
        cost[self.again[v] - self.count] = float(self.graph.cost[v])
        self.cost.append(cost)
        self.memory.append((stages[keeps], first[keeps], float(self.graph.mem[v])))
        self.count += len(cost)

    def _add_rows(self, columns: list[np.ndarray], values: list[float],
                  lower: np.ndarray) -> None:
        """One row per entry of ``lower``: sum of values[k] * columns[k][row] >= lower[row],
        a column of -1 left out."""
        ids = self.row_count + np.arange(len(lower))
        for col, value in zip(columns, values):
            take = col >= 0
            self.entries.append((ids[take], col[take], np.full(int(take.sum()), value)))
        self.lower.append(lower)
        self.row_count += len(lower)

    def _kept_rows(self, v: int, until: int) -> None:
        kept, again = self.kept[v], self.again[v]
        before = kept[:-1]
        has = before >= 0  # rows at t = v + 2..until where y[v, t - 1] exists
        before, now, after = before[has], again[1:][has], kept[1:][has]
        lower = (after < 0).astype(float)  # a stage that reads v: resident or computed (>= 1)
        self._add_rows([before, now, after], [1.0, 1.0, -1.0], lower)

    def _input_rows(self, v: int, until: int) -> None:
        deps = [d for d in self.graph.deps[v] if d in self.kept]
        if not deps:
            return
        stages = np.arange(v + 1, until + 1)
        held = np.full((len(stages), len(deps)), -1)
        made = np.full((len(stages), len(deps)), -1)
        for k, d in enumerate(deps):  # y[d, t - 1] for t - 1 in d + 1..: at t - d - 2
            at = stages - d - 2
            inside = (at >= 0) & (at < len(self.kept[d]))
            held[inside, k] = self.kept[d][at[inside]]
            made[inside, k] = self.again[d][at[inside] + 1]
        ours = np.repeat(self.again[v], len(deps)).reshape(len(stages), len(deps))
        has = held >= 0  # t outer, d inner, as the loops of ``_Model``
        self._add_rows([held[has], made[has], ours[has]], [1.0, 1.0, -1.0],
                       np.zeros(int(has.sum())))

    def arrays(self) -> dict:
        from scipy.sparse import coo_matrix

        stages = np.concatenate([s for s, _, _ in self.memory]).astype(np.int64)
        columns = np.concatenate([c for _, c, _ in self.memory])
        sizes = np.concatenate([np.full(len(s), size) for s, _, size in self.memory])
        used, memory_rows = np.unique(stages, return_inverse=True)
        rows = np.concatenate([memory_rows] + [len(used) + r for r, _, _ in self.entries])
        cols = np.concatenate([columns] + [c for _, c, _ in self.entries])
        vals = np.concatenate([sizes] + [v for _, _, v in self.entries])
        lower = np.concatenate([np.full(len(used), -np.inf)] + self.lower)
        shape = (len(used) + self.row_count, self.count)
        cost = np.concatenate(self.cost)
        return dict(matrix=coo_matrix((vals, (rows, cols)), shape=shape).tocsc(),
                    row_lower=lower,
                    row_upper=np.concatenate([self.room[used].astype(float),
                                              np.full(self.row_count, np.inf)]),
                    col_lower=np.zeros(self.count), col_upper=np.ones(self.count),
                    cost=cost, integrality=np.ones(self.count, dtype=bool))


def _recompute_rows(graph: RematGraph, model: "_Model", kept: dict, again: dict, t: int,
                    values: list[int], free: float) -> None:
    """The memory at each computation of ``values`` (the tracked values that stage t may
    compute again, in order) in stage t: at the moment v is computed (``z[v, t]``), memory
    holds v, its workspace and its inputs, plus three disjoint sets: the values resident from
    the start of the stage to node t (``held``: resident at the start and alive at node t; the
    simulator frees a resident value only after its last read in the stage, and a recomputed
    copy replaces it), the values computed earlier in the stage and alive at node t
    (``earlier``), and the values resident at the start that a later computation in the stage
    reads (``pending``; each counted through one reader, its last one that stage t can
    compute, which keeps the count linear and only lowers it). So

        held + earlier(< v) + pending(> v) + (m_v + w_v + sum m_deps(v)) z[v, t]
            - sum over inputs d of m_d (held_d + fresh_d + waits_d)  <=  free,

    the inputs' terms removing what the sets already count. With z[v, t] = 0 the left side is
    at most what is alive at node t, so the row holds for every schedule either way; the
    continuous columns sit at their lower bounds (raising one never lowers a row)."""
    through, fresh, earlier, held = {}, {}, {}, model.column(0.0, upper=math.inf)
    held_cols, held_vals, last = [held], [1.0], None
    for v in values:
        z, start, mem = again[v, t], kept[v, t - 1], float(graph.mem[v])
        through[v], fresh[v] = model.column(0.0, upper=1.0), model.column(0.0, upper=1.0)
        earlier[v] = model.column(0.0, upper=math.inf)
        if t in graph.users[v]:  # alive at node t: through >= start, fresh >= z - start
            model.row([through[v], start], [1.0, -1.0], 0.0)
            model.row([fresh[v], z, start], [1.0, -1.0, 1.0], 0.0)
        elif (v, t) in kept:  # through >= start + y - 1, fresh >= z + y - 1 - start
            model.row([through[v], start, kept[v, t]], [1.0, -1.0, -1.0], -1.0)
            model.row([fresh[v], z, kept[v, t], start], [1.0, -1.0, -1.0, 1.0], -1.0)
        held_cols.append(through[v])
        held_vals.append(-mem)
        step = [earlier[v], fresh[v]] + ([earlier[last]] if last is not None else [])
        model.row(step, [1.0, -mem, -1.0][:len(step)], 0.0)
        last = v
    model.row(held_cols, held_vals, 0.0)
    waits, pending = _pending(graph, model, kept, again, t, values, through)
    last = None
    for v in values:
        size = float(graph.mem[v] + graph.workspace[v])
        cols, vals = [held, pending[v], again[v, t]], [-1.0, -1.0, 0.0]
        if last is not None:
            cols.append(earlier[last])
            vals.append(-1.0)
        for d in graph.deps[v]:
            size += float(graph.mem[d])
            if d in through:
                cols += [through[d], fresh[d]]
                vals += [float(graph.mem[d])] * 2
            if d in waits and waits[d][0] > v:
                cols.append(waits[d][1])
                vals.append(float(graph.mem[d]))
        vals[2] = -size
        model.row(cols, vals, -free)
        last = v


def _pending(graph: RematGraph, model: "_Model", kept: dict, again: dict, t: int,
             values: list[int], through: dict) -> tuple[dict, dict]:
    """For ``_recompute_rows``: per value u resident at the start of stage t, (its last
    reader r that stage t can compute, column ``waits_u`` >= y[u, t-1] + z[r, t] - 1 -
    held_u); per value v, column ``pending_v`` >= the bytes of the waits whose reader comes
    after v (a running sum from the last value down)."""
    waits, by_reader = {}, {}
    for u in values:
        readers = [r for r in graph.users[u] if (r, t) in again]
        if (u, t - 1) not in kept or not readers:
            continue
        reader, col = max(readers), model.column(0.0, upper=1.0)
        model.row([col, kept[u, t - 1], again[reader, t], through[u]], [1.0, -1.0, -1.0, 1.0],
                  -1.0)
        waits[u] = (reader, col)
        by_reader.setdefault(reader, []).append(u)
    pending, after = {}, None
    for v in reversed(values):
        pending[v] = model.column(0.0, upper=math.inf)
        cols, vals = [pending[v]], [1.0]
        if after is not None:
            cols.append(pending[after])
            vals.append(-1.0)
            for u in by_reader.get(after, []):
                cols.append(waits[u][1])
                vals.append(-float(graph.mem[u]))
        model.row(cols, vals, 0.0)
        after = v
    return waits, pending


FORCED_TOLERANCE = 1e-9
"""Relative margin by which a row must be out of reach before ``_forced`` fixes a column
(float sums of byte sizes): a fixing it is not sure of is not made."""


def _forced(model: dict) -> tuple[np.ndarray, np.ndarray]:
    """The bounds of the 0/1 columns of ``model`` that its rows force (bound propagation, as
    a MIP presolve does; HiGHS's own runs off, ``highs_backend.run``): a column goes to 1
    where its row cannot reach its lower bound without it, to 0 where it alone would take its
    row past a bound, each with a margin (``FORCED_TOLERANCE``); then the rows of the columns
    fixed are looked at again, until nothing changes. Every solution of the model keeps
    within the bounds returned, so its least price is at least the price of the columns fixed
    plus the ``_least_price`` of the model without them (``_without_fixed``). In the moment
    model the cascades of a tight budget come out this way: a value too large to keep across
    a stage is computed again in each stage that reads it after, and so are its inputs; at a
    unit chain's least peak that is the whole optimum.
    (lower, upper); the model's own where a column is not 0/1."""
    lower = model["col_lower"].astype(float).copy()
    upper = model["col_upper"].astype(float).copy()
    if not (model["integrality"].all() and (lower == 0).all() and (upper == 1).all()):
        return lower, upper
    by_row = model["matrix"].tocsr()
    by_column = model["matrix"].tocsc()
    has_lower, has_upper = np.isfinite(model["row_lower"]), np.isfinite(model["row_upper"])
    rows = np.arange(by_row.shape[0])
    while len(rows):
        ones, zeros = _propagate(by_row, model["row_lower"], model["row_upper"], rows, lower,
                                 upper)
        if (lower > upper).any():  # every schedule is a solution and the all-rebuild one fits
            raise AssertionError("retention bound: the moment model's rows contradict")
        # again only the rows a fixing can tighten: a column up to 1 raises the least
        # activity of its rows (a > 0), down to 0 lowers the most (a > 0)
        rows = []
        for changed, raised in ((ones, True), (zeros, False)):
            at = _spread(by_column.indptr, changed)
            row, positive = by_column.indices[at], by_column.data[at] > 0
            tighter = np.where(positive == raised, has_upper[row], has_lower[row])
            rows.append(row[tighter])
        rows = np.unique(np.concatenate(rows))
    return lower, upper


def _spread(indptr: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """The positions of the entries of the ``picked`` rows (CSR) or columns (CSC)."""
    starts, ends = indptr[picked], indptr[picked + 1]
    counts = ends - starts
    return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())


def _propagate(by_row, row_lower: np.ndarray, row_upper: np.ndarray, rows: np.ndarray,
               lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One round of ``_forced`` over ``rows``: fixes columns in ``lower``/``upper`` in place;
    returns the columns it fixed (to 1, to 0)."""
    at = _spread(by_row.indptr, rows)
    row = np.repeat(np.arange(len(rows)), by_row.indptr[rows + 1] - by_row.indptr[rows])
    col, a = by_row.indices[at], by_row.data[at]
    low, high = np.minimum(a * lower[col], a * upper[col]), np.maximum(a * lower[col],
                                                                        a * upper[col])
    least = np.bincount(row, low, len(rows))[row] - low  # the other entries' activity
    most = np.bincount(row, high, len(rows))[row] - high
    floor, ceiling = row_lower[rows][row], row_upper[rows][row]
    with np.errstate(invalid="ignore"):  # inf - inf where a row has no such bound
        need = floor - most  # a * x must reach it
        room = ceiling - least  # a * x must stay within it
        margin_low = FORCED_TOLERANCE * np.maximum(1.0, np.abs(floor))
        margin_high = FORCED_TOLERANCE * np.maximum(1.0, np.abs(ceiling))
        ones = ((a > 0) & (need > margin_low)) | ((a < 0) & (room < -margin_high))
        zeros = ((a > 0) & (a > room + margin_high)) | ((a < 0) & (need > a + margin_low))
    ones &= lower[col] < 1
    zeros &= upper[col] > 0
    lower[col[ones]] = 1.0
    upper[col[zeros]] = 0.0
    return np.unique(col[ones]), np.unique(col[zeros])


def _least_price(model: dict) -> float:
    """The least price of the model's columns within their bounds, each alone."""
    cost = model["cost"]
    return float(np.minimum(cost * model["col_lower"], cost * model["col_upper"]).sum())


def _without_fixed(model: dict, lower: np.ndarray, upper: np.ndarray) -> tuple[dict, float]:
    """``model`` with its fixed columns (lower == upper) taken out and their entries moved
    into the row bounds: (the smaller model, the price of the fixed columns). Its optimum
    plus that price is the optimum of ``model`` within the bounds."""
    fixed = lower == upper
    free = ~fixed
    matrix = model["matrix"].tocsc()
    moved = matrix[:, fixed] @ lower[fixed]
    return dict(matrix=matrix[:, free], row_lower=model["row_lower"] - moved,
                row_upper=model["row_upper"] - moved, col_lower=lower[free],
                col_upper=upper[free], cost=model["cost"][free],
                integrality=model["integrality"][free]), float(model["cost"][fixed] @ lower[fixed])


class _Model:
    """A small 0/1 program for HiGHS: one memory row per stage (bounded by ``room``), extra
    rows, and a cost per column. Memory is held as spans (a column's bytes in the rows of
    stages first..last), written out as one entry per stage, or as running levels
    (``_levels``) where that is much sparser and every span has the same size."""

    def __init__(self, room: np.ndarray):
        self.room = room
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.first: list[int] = []  # memory spans: stages first..last, column, bytes
        self.last: list[int] = []
        self.columns: list[int] = []
        self.sizes: list[float] = []
        self.rows: list[tuple[list[int], list[float], float]] = []  # (columns, values, lower)

    def column(self, cost: float, upper: float | None = None) -> int:
        """A 0/1 column, or with ``upper`` a continuous one in [0, upper]."""
        self.cost.append(cost)
        self.upper.append(1.0 if upper is None else upper)
        self.integer.append(upper is None)
        return len(self.cost) - 1

    def memory(self, stage: int, column: int, size: float) -> None:
        self.memory_span(stage, stage, column, size)

    def memory_span(self, first: int, last: int, column: int, size: float) -> None:
        """``size`` bytes of ``column`` in the memory row of each stage first..last."""
        if last >= first:
            self.first.append(first)
            self.last.append(last)
            self.columns.append(column)
            self.sizes.append(size)

    def row(self, columns: list[int], values: list[float], lower: float) -> None:
        self.rows.append((columns, values, lower))

    def _span_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(first, last, columns, sizes) of the memory spans."""
        return (np.array(self.first, dtype=np.int64), np.array(self.last, dtype=np.int64),
                np.array(self.columns, dtype=np.int64), np.array(self.sizes, dtype=float))

    def _stages(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        """The stages some span covers (the memory rows), in order."""
        covered = np.zeros(len(self.room) + 1, dtype=np.int64)  # spans starting - ending
        np.add.at(covered, first, 1)
        np.add.at(covered, last + 1, -1)
        return np.flatnonzero(np.cumsum(covered[:-1]) > 0)

    def one_size(self) -> bool:
        return len(set(self.sizes)) == 1

    def relaxed_first(self) -> bool:
        """Whether the LP relaxation, as levels, is worth solving before the program written
        out (``_relaxed``): the levels are much sparser, but of several sizes."""
        first, last, _, _ = self._span_arrays()
        return not self.one_size() and _sparser_as_levels(first, last, self._stages(first, last))

    def arrays(self, levels: bool | None = None) -> dict:
        """The HiGHS arrays; ``levels``: the memory rows as levels (``_levels``) or not, by
        default where ``LEVELS_GAIN`` says."""
        from scipy.sparse import coo_matrix

        first, last, columns, sizes = self._span_arrays()
        stages = self._stages(first, last)
        if levels is None:
            levels = self.one_size() and _sparser_as_levels(first, last, stages)
        if levels:
            rows, cols, vals, added = _levels(first, last, columns, sizes, stages, len(self.cost))
        else:
            rows, cols, vals, added = _entries(first, last, columns, sizes, stages)
        extra_rows, extra_cols, extra_vals = [], [], []
        for k, (row_columns, values, _) in enumerate(self.rows):
            extra_rows += [len(stages) + k] * len(row_columns)
            extra_cols += row_columns
            extra_vals += values
        rows = np.concatenate([rows, np.array(extra_rows, dtype=np.int64)])
        cols = np.concatenate([cols, np.array(extra_cols, dtype=np.int64)])
        vals = np.concatenate([vals, np.array(extra_vals, dtype=float)])
        room = self.room[stages].astype(float)
        memory_lower = np.zeros(len(stages)) if levels else np.full(len(stages), -np.inf)
        memory_upper = np.zeros(len(stages)) if levels else room
        extra = [lo for _, _, lo in self.rows]
        count = len(self.cost) + added
        shape = (len(stages) + len(self.rows), count)
        return dict(matrix=coo_matrix((vals, (rows, cols)), shape=shape).tocsc(),
                    row_lower=np.concatenate([memory_lower, extra]),
                    row_upper=np.concatenate([memory_upper, np.full(len(self.rows), np.inf)]),
                    col_lower=np.concatenate([np.zeros(len(self.cost)), np.full(added, -np.inf)]),
                    col_upper=np.concatenate([self.upper, room[:added]]),
                    cost=np.concatenate([self.cost, np.zeros(added)]),
                    integrality=np.concatenate([np.array(self.integer, dtype=bool),
                                                np.zeros(added, dtype=bool)]))


LEVELS_GAIN = 4
"""``_Model`` writes its memory rows as running levels (``_levels``) where every span has the
same size and that takes this many times fewer nonzeros than one entry per stage. The memory
rows are then interval rows of one coefficient, a knapsack far easier than one of many sizes,
and the levels make them O(spans): the gap knapsack of linear(4096, unit), 16.8M nonzeros
written out, 24566 as levels, solved in 1.1 s instead of 16-22 s; linear(2048, unit)
in 0.5-0.6 s instead of 3.3-4.9 s, with the same bounds (bench/results/fast_notes.md, session 24).
Not with several sizes: the knapsack is then a true MIP, and HiGHS's cuts need the rows written
out. Heterogeneous linear(2048) at 60%: 11.7 s written out, unsolved in 60 s as levels; the gap
models of seven zoo and random graphs at 30-80% of their budgets, as levels: slower or lower
on 23 of 28 (e.g. random_dag(100) at 40%: 13.9 s, unsolved in 30 s as levels)."""


def _sparser_as_levels(first: np.ndarray, last: np.ndarray, stages: np.ndarray) -> bool:
    """Whether spans first..last over memory rows ``stages`` take ``LEVELS_GAIN`` times fewer
    nonzeros as levels (two per span, two per row) than entry by entry."""
    return int((last + 1 - first).sum()) > LEVELS_GAIN * 2 * (len(first) + len(stages))


def gaps_of_one_size(graph: RematGraph) -> bool:
    """Whether every gap (``gaps``) is of a value of one size, as on unit chains: the gap
    knapsack is then written as levels where that is sparser (``LEVELS_GAIN``), and HiGHS sets
    up O(gaps) nonzeros, not one per gap and stage."""
    return len({float(graph.mem[v]) for v, _, _ in gaps(graph)}) == 1


def _entries(first, last, columns, sizes, stages):
    """The memory rows with one entry per span and stage: (rows, columns, values, 0 columns
    added)."""
    counts = last + 1 - first
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    at = np.repeat(first, counts) + offsets
    return (np.searchsorted(stages, at), np.repeat(columns, counts), np.repeat(sizes, counts),
            0)


def _levels(first, last, columns, sizes, stages, count):
    """The memory rows as levels: one continuous column per memory row j, ``L_j <= room``,
    with ``L_j = L_{j-1} + (spans starting at stage j) - (spans that ended at stage j-1)``:
    two entries per span instead of one per stage it covers (no span skips a memory row, so
    these are the spans alive at stage j). Returns (rows, columns, values, columns added)."""
    begin = np.searchsorted(stages, first)
    end = np.searchsorted(stages, last) + 1  # the first row the span no longer counts in
    ends = end < len(stages)
    level = count + np.arange(len(stages))
    rows = np.concatenate([begin, end[ends], np.arange(len(stages)), np.arange(1, len(stages))])
    cols = np.concatenate([columns, columns[ends], level, level[:-1]])
    vals = np.concatenate([-sizes, sizes[ends], np.ones(len(stages)),
                           -np.ones(max(len(stages) - 1, 0))])
    return rows, cols, vals, len(stages)
