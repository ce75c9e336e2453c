"""``retention``: keep what the retention knapsack keeps, recompute the rest where it is read.

The retention bound (``remat.solvers.bounds``) chooses a set K of gaps (runs of stages between
two reads of a value) to keep values alive across, within the budget at every stage, dropping
the cheapest to recompute. This method turns such a K into a schedule (``Plan``): a value is
resident from its computation to its last read except across its gaps outside K, after each
of which the stage that reads it computes it again (with any missing inputs), and ``tighten``
removes what nobody reads. The knapsack ignores two things, so the method iterates:

- the price of dropping a gap is not v's cost but the cost of rebuilding v there (its absent
  ancestors too): after each round the weights become those rebuild costs;
- recomputed values need room the knapsack did not reserve: when a schedule goes over the
  budget, the knapsack is solved again with each stage's room cut by that stage's overshoot
  (a few times), then with the room scaled down as a whole, until one fits.

Every schedule is priced by the simulator; the cheapest that fits wins. Two hill-climbing
passes follow, each move kept only if it lowers the cost and still fits: keep one more gap
(``_grow``), then keep a value from its previous computation instead of computing it again
(``_hold``), which also keeps an ancestor rebuilt for one value for the next: on the tiny
U-Net at op level, 60%, that pass takes the cost from 1.438 to 1.096 of the total (bound
1.064). The gaps the bound's own knapsack keeps (its rebuild rows know which inputs a
rebuild needs) are a second start, also followed by the hold pass, and tried first
(``_held_bound``): where it meets the bound, nothing else runs; where no classic baseline
fits the budget, the lowest one's schedule, its peak lowered until it fits, is another, the
cheaper of the two kept (``_from_baseline``, built before them, with a limit of at least
``FROM_BASELINE_LEAST_SECONDS``). Where the caller gives a schedule that fits
(``options.initial``: auto passes its cheapest so far, a classic baseline's), it is a start
too, tightened and after the hold pass, tried after the bound's where that is not proven
(``_from_given``): auto with 1 s on fcn_resnet50 at op level, 50%, returned ap-greedy's
1.3335 of the total cost, the bound's start not fitting and the knapsacks taking 0.2-2 s
each; now 1.1990 (a 12-layer GPT-2 at op level, 20%: 1.3287 -> 1.2614-1.2749;
bench/results/fast_notes.md, session 44). Where none of these is proven, selective
checkpointing is one more (``_selective``): every gap kept but those across the loss of the
values cheapest to drop per byte, dropped until the schedule fits, then the hold pass: on a
12-layer GPT-2 at op level, 40%, 1.0453 of the total cost (its first order, 2 s), where the
bound's gaps do not fit and the other starts stop at 1.1772 (sessions 45-46). Then an
iterated local search (``_search``: random kicks and restarts, seeded by ``options.seed``)
runs from the cheaper start until the time limit or until it stops finding better, and then,
with the time left, from the other (``_searched``); the same searches run beside it with
other seeds, in helper processes on the cores it leaves idle (``remat.solvers.beside``). It
scales to thousands of nodes (one small knapsack per try; the passes stop at the time limit) and
reports the retention bound as its ``lower_bound``, status "optimal" where it meets it.

Where no choice of gaps fits (a rebuild in one stage holds more at once than the budget
allows), ``remat.solvers.descent`` lowers the peak of other schedules until one fits (the
cheapest at slightly looser budgets, else the lowest-peak one tried or checkpoint-all's:
``_descended``), then the hold pass and the search take its cost down; so is the bound's
own schedule where it goes over the budget (``_from_bound``). fcn_resnet50 at module level,
40%: no schedule before session 11, 1.1656 of the total now (bound 1.1506); 60%: 1.0418
before, 1.0180 now (bound 1.0094); 30 s each. gpt2 at module level, 30%: no schedule before
session 12, 1.3407 now (bound 1.3210).
"""
from __future__ import annotations

import math
import time

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.budget import checkpoint_all_peak
from remat.schedule.rs import checkpoint_all, tighten
from remat.schedule.simulate import compute_cost, nonzero, restaged, simulate, stage_peaks
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions, may_go_on, past, schedule_event
from remat.solvers.beside import GRACE, Beside, cores
from remat.solvers.bounds import (Bound, bound_time, gaps, meets, retained,
                                  retention_bound, runs, stage_room)
from remat.solvers.descent import descend, fits
from remat.solvers.interrupt import requested
from remat.solvers.peak_floor import known_floor

ROUNDS = 3
"""Weight updates (rebuild costs from the previous K); more rarely helped (measured)."""
REPAIRS = 6
"""Knapsack solves that cut each stage's room by its overshoot before scaling down."""
SCALES = (1.0, 0.85, 0.7, 0.5, 0.25, 0.0)
"""Then: fractions of the room above the smallest stage room, tried until a schedule fits."""
LEAST_STEPS = 8
"""Budgets ``_least_peak`` tries between the least possible peak and checkpoint-all's."""
GROW_SECONDS = 10.0
"""Time for the final hill climbing when the caller gives no time limit."""
GROW_SHARE = 1 / 3
"""Of the time left for hill climbing, the most the gap pass may take before the hold pass
(on random_dag(500) at 40% the gap pass alone took 21 s of 30 and left the hold pass none)."""


def solve(graph: RematGraph, budget: float, options: SolveOptions) -> Solution:
    began = time.perf_counter()
    deadline = None if options.time_limit is None else began + options.time_limit
    known = retention_bound(graph, budget, bound_time(options.time_limit), options.threads)
    plan = Plan(graph)
    end = deadline or began + GROW_SECONDS  # where the starts stop without a time limit
    low = None if options.time_limit is not None and \
        options.time_limit < FROM_BASELINE_LEAST_SECONDS else \
        _from_baseline(plan, budget, _share_of(end, FROM_BASELINE_PARTS),
                       known.value)  # the passes after may take all
    held = _held_bound(plan, budget, known, end)
    given = None if _proven(held, known.value) else \
        _from_given(plan, budget, options.initial, _share_of(end, FROM_BASELINE_PARTS),
                    known.value)
    start = _cheaper(_cheaper(held, low), given)
    if not _proven(start, known.value):
        start = _cheaper(start, _selective(plan, budget, _share_of(end, SELECTIVE_PARTS),
                                           known.value))
    report = _reporter(options, known.value, began)
    report(start)
    if start is not None and (_proven(start, known.value) or past(deadline)):
        return _solution(graph, budget, start, known.value, began, deadline, tries=0)
    best, weights, tries = None, plan.own_costs(), 0
    for _ in range(ROUNDS):
        found, kept, count = _fit(plan, budget, weights, deadline, options.threads)
        tries += count
        if found is not None and (best is None or found[0] < best[0]):
            best = found
        if kept is None or past(deadline):
            break
        weights = plan.rebuild_costs(kept)
    report(best)
    until = deadline or time.perf_counter() + GROW_SECONDS
    if held is None:  # the bound's schedule goes over the budget: lower its peak first
        start = _cheaper(start, _from_bound(plan, budget, known.kept, until, known.value))
    descended = best is None and budget >= known_floor(graph)
    if descended:  # no choice of gaps fits: lower the peak of other schedules
        best = _descended(plan, budget, until)
    if best is not None and descended:
        best = _hold(plan, budget, best, until, bound=known.value)
    elif best is not None and not _proven(start, known.value) and not _proven(best, known.value):
        now = time.perf_counter()
        best = _grow(plan, budget, best, weights, now + GROW_SHARE * max(0.0, until - now),
                     known.value)
        if not _proven(best, known.value):
            best = _hold(plan, budget, best, until, bound=known.value)
    best = _searched(plan, budget, best, start, until, options, known.value, report)
    if best is None:  # min_budget: the least peak this method reaches
        least = _least_peak(plan, budget, until, options.threads)
        proof = {"proven": True} if budget < known_floor(graph) else {}  # below the least peak
        return Solution.infeasible(graph, "retention", budget, least,
                                   solve_time=time.perf_counter() - began, tries=tries, **proof)
    return _solution(graph, budget, best, known.value, began, deadline, tries)


def _solution(graph: RematGraph, budget: float, best: tuple, bound: float, began: float,
              deadline: float | None, tries: int) -> Solution:
    """The schedule ``best`` (cost, R, S, kept) as this method's result."""
    status = "optimal" if meets(best[0], bound) else \
        ("timeout" if past(deadline) else "feasible")
    return Solution.from_schedule(graph, best[1], best[2], "retention", status, budget,
                                  lower_bound=bound, solve_time=time.perf_counter() - began,
                                  tries=tries)


def _reporter(options: SolveOptions, bound: float, began: float):
    """A function that sends each schedule (cost, R, S, kept) cheaper than the ones before
    to ``options.progress`` (its cost, ``bound``, the gap and the seconds since ``began``):
    the search's start and each schedule that improves on it, so that a long search shows
    where it is (``remat solve``, auto's progress)."""
    least = [math.inf]

    def report(found: tuple | None) -> None:
        if options.progress is None or found is None or found[0] >= least[0]:
            return
        least[0] = found[0]
        options.progress(schedule_event(found[0], bound, began))
    return report


def _silent(found: tuple | None) -> None:
    """No progress to report (``_reporter``'s place where the caller gives none)."""


def _fit(plan: "Plan", budget: float, weights: np.ndarray, deadline, threads,
         gap: float = 0.0):
    """The first schedule that fits: the knapsack's room is cut by each stage's overshoot
    (``REPAIRS`` times), then scaled down as a whole; each knapsack solved within the relative
    ``gap``. Returns ((cost, R, S, kept) or None, the kept gaps of the last try, number of
    tries); ``plan.lowest`` keeps the least peak seen."""
    graph = plan.graph
    full = stage_room(graph, budget)
    floor = full.min()  # the room every stage has at the smallest possible budget
    rooms = [full] * REPAIRS + [floor + scale * (full - floor) for scale in SCALES[1:]]
    kept, tries, cut = None, 0, np.zeros(graph.size)
    for attempt, room in enumerate(rooms):
        if not may_go_on(deadline, tries > 0):  # a first fit even late
            break
        limit = 2.0 if deadline is None else max(0.1, min(2.0, deadline - time.perf_counter()))
        room = np.maximum(room - cut, 0.0) if attempt < REPAIRS else room
        kept = retained(graph, room, plan.gaps, weights, time_limit=limit, threads=threads,
                        mip_rel_gap=gap)
        plan.work += 1
        if kept is None:
            continue
        tries += 1
        found, sim = plan.attempt(kept, budget)
        if found is not None:
            return found, kept, tries
        cut += np.maximum(sim.stage_peaks(graph.size) - budget, 0.0)
    return None, kept, tries


def _least_peak(plan: "Plan", budget: float, deadline: float, threads) -> float:
    """The least peak of the schedules tried (``plan.lowest``), for ``min_budget``. Below the
    least possible peak known (``known_floor``: no schedule of the graph fits) budgets from
    that floor up to checkpoint-all's peak (``LEAST_STEPS`` steps) are tried until one fits,
    and their least peak says what this method can meet (keeping nothing peaks higher: gpt2
    at module level, 8.03 MiB, 84% of the way to checkpoint-all's peak, against 3.84 MiB so);
    keep nothing at worst. ``deadline``: the caller's (``GROW_SECONDS`` from its start
    without a limit)."""
    graph = plan.graph
    floor, top = known_floor(graph), checkpoint_all_peak(graph)
    for step in range(LEAST_STEPS + 1 if budget < floor else 0):
        if past(deadline):
            break
        trial = floor + step / LEAST_STEPS * (top - floor)
        if _fit(plan, trial, plan.own_costs(), deadline, threads)[0] is not None:
            break
    least = plan.lowest[0]
    if not math.isfinite(least):
        least = simulate(graph, *plan.schedule(set())).peak_memory
    return least


def _descended(plan: "Plan", budget: float, deadline: float) -> tuple | None:
    """Where no choice of gaps fits: ``descent.descend`` from several starts, each try given
    an equal share of the time left (most stop sooner, where no move helps). First the
    cheapest schedules at looser budgets (``_looser``), cost-aware, the cheapest that fits
    returned; where none fits, the lowest-peak schedule tried (those at the looser budgets
    included) and checkpoint-all's, cost-aware, then by peak alone, the first that fits
    returned; None if none gets there (gpt2 at op level, 20%, 15 s: the least peak it reports
    3857416 B when the lowest was taken before the looser tries, 3628040 B so). The descent is
    greedy and stops where no move (or pair) lowers the peak, in a different place from each
    start and ranking. gpt2 at module level, 30% (3.75 MB): from the lowest it stops at 3.83 MB,
    from checkpoint-all it fits at cost 1.81 of the total after the hold pass, from the
    cheapest schedule at 33% at 1.34 (bound 1.32); at 3.676 MB, its least known peak, the
    looser starts fit (0.6-0.9 s each), and of the other four only checkpoint-all's by peak."""
    graph = plan.graph
    found, tries = [], len(LOOSER) + 4  # then (lowest, checkpoint-all) x (cost-aware, by peak)
    for k, share in enumerate(LOOSER):
        if past(deadline):  # each try solves a knapsack and prices it at least once
            break
        until = _share_of(deadline, tries - k)
        start = _looser(plan, budget, share, until)
        point = None if start is None else descend(graph, start, budget, until, cheap=True)
        if point is not None and point.fits(budget):
            found.append((point.sim.compute_cost, point.R, point.S, set()))
    if found:
        return min(found, key=lambda item: item[0])
    starts = [checkpoint_all(graph)[1]]  # the lowest seen includes the looser budgets' tries
    if math.isfinite(plan.lowest[0]):
        starts.insert(0, plan.lowest[1])
    later = [(S, cheap) for cheap in (True, False) for S in starts]
    for k, (S, cheap) in enumerate(later):
        point = descend(graph, S, budget, _share_of(deadline, len(later) - k), cheap=cheap)
        plan.lowest = min(plan.lowest, (point.sim.peak_memory, point.S), key=lambda low: low[0])
        if point.fits(budget):
            return point.sim.compute_cost, point.R, point.S, set()
        if past(deadline):
            return None
    return None


LOOSER = (0.02, 0.05, 0.1)
"""Budgets above the one asked, as shares of the range from static memory to checkpoint-all's
peak, whose cheapest schedule by gaps is a start for ``_descended``."""


def _looser(plan: "Plan", budget: float, share: float, deadline: float) -> np.ndarray | None:
    """S of the cheapest schedule by gaps (after the hold pass) within ``budget`` plus
    ``share`` of the budget range, or None where none fits there either."""
    graph = plan.graph
    looser = budget + share * (checkpoint_all_peak(graph) - graph.static_mem)
    found, _, _ = _fit(plan, looser, plan.own_costs(), deadline, None)
    if found is None:
        return None
    now = time.perf_counter()
    return _hold(plan, looser, found, now + (deadline - now) / 2)[2]


def _share_of(deadline: float, tries: int) -> float:
    """The deadline of the next of ``tries`` tries that share the time left equally."""
    now = time.perf_counter()
    return now + max(0.0, deadline - now) / max(tries, 1)


def _proven(found: tuple | None, bound: float) -> bool:
    return found is not None and meets(found[0], bound)


def _cheaper(a: tuple | None, b: tuple | None) -> tuple | None:
    return a if b is None or (a is not None and a[0] <= b[0]) else b


def _searched(plan: "Plan", budget: float, best: tuple | None, start: tuple | None,
              deadline: float, options: SolveOptions, bound: float,
              report=_silent) -> tuple | None:
    """The cheapest of the search (``_search``) from the cheaper of two starts (the hill
    climbing's best; the bound's schedule, or ``_from_baseline``'s where cheaper) and, where
    it stalls before ``deadline``, from the other: gpt2 at op level, 30%, 60 s: the bound's
    schedule (1.2655 of the total cost) is a basin the search does not leave (1.2650 after
    24 s); from the other start (1.2744) it reaches 1.2270. Beside it, the same searches
    with other seeds in helper processes (``_helpers``), and the cheapest of all wins."""
    first = _cheaper(best, start)
    report(first)
    if first is None or _proven(first, bound):
        return first
    helpers = _helpers(plan, budget, best, start, deadline, options, bound)
    try:
        found = _in_turn(plan, budget, best, start, deadline,
                         (options.seed, options.seed + 1), options.threads, bound, report)
        others = [] if helpers is None else helpers.results(
            None if requested() or _proven(found, bound) else deadline + GRACE, requested)
    finally:
        if helpers is not None:
            helpers.stop()
    for other in others:
        if other[0] < found[0] - 1e-12 * abs(found[0]):
            found = other
            report(found)
    return found


BESIDE_LEAST_SECONDS = 5.0
"""The least time left for which ``_searched`` starts searches beside its own (a helper
starts in 0.2 s)."""


def _helpers(plan: "Plan", budget: float, best: tuple | None, start: tuple | None,
             deadline: float, options: SolveOptions, bound: float) -> Beside | None:
    """Searches beside ``_searched``'s own (``remat.solvers.beside``), where
    ``BESIDE_LEAST_SECONDS`` or more are left: one per thread ``options.threads`` allows
    beyond this one (2 in all where it says nothing, as CP-SAT's workers), and no more than
    the cores left (``beside.cores``); None if none."""
    count = min((options.threads or 2) - 1, cores() - 1)
    if count <= 0 or deadline - time.perf_counter() < BESIDE_LEAST_SECONDS:
        return None
    job = dict(graph=plan.graph, budget=budget, best=best, start=start, seed=options.seed,
               bound=bound, wall_deadline=time.time() + deadline - time.perf_counter())
    return Beside("remat.solvers.retention:search_beside", job, count)


def search_beside(graph: RematGraph, budget: float, best: tuple | None, start: tuple | None,
                  seed: int, bound: float, wall_deadline: float, helper: int) -> tuple:
    """``_searched``'s searches in helper process number ``helper`` (``_helpers``), until
    ``wall_deadline`` (``time.time()``: ``time.perf_counter()``, the clock of deadlines, is
    not shared between processes), their random streams ``[seed, helper]`` (not seed +
    helper: a helper would repeat the search of a call with that seed), their HiGHS
    knapsacks on one thread."""
    deadline = time.perf_counter() + (wall_deadline - time.time())
    return _in_turn(Plan(graph), budget, best, start, deadline,
                    ([seed, helper], [seed + 1, helper]), 1, bound, _silent)


def _in_turn(plan: "Plan", budget: float, best: tuple | None, start: tuple | None,
             deadline: float, seeds: tuple, threads, bound: float, report) -> tuple:
    """``_search`` from the cheaper of ``best`` and ``start`` (one of them not None), then,
    where it stalls before ``deadline``, from the other, with the two ``seeds`` in turn."""
    first, other = (best, start) if _cheaper(best, start) is best else (start, best)
    found = _search(plan, budget, first, deadline, seeds[0], threads, bound, report)
    if other is None or past(deadline) or _proven(found, bound):
        return found
    again = _search(plan, budget, other, deadline, seeds[1], threads, bound, report)
    return _cheaper(found, again)


STARTS_PARTS = 2
"""``_held_bound`` gives the starts after the first 1 / this of the time it is given."""


def _held_bound(plan: "Plan", budget: float, known: Bound, deadline: float) -> tuple | None:
    """The cheapest schedule of the gaps the bound's own knapsacks keep (``known.kept``, then
    ``known.other_kept``: their rebuild rows make them drop values whose inputs stay alive
    anyway), each after the hold pass; None if none fits. On the tiny U-Net at op level, 80%,
    it reaches the bound, 1.0013 of the total, where the knapsack with rebuild-cost weights
    led to 1.0165. ``solve`` tries it first: where it meets the bound nothing else runs
    (MobileNetV2 at op level, 40%: the knapsack rounds before it took 4.3 of retention's 4.8
    s; random_dag(500) at 40%: 2.1 of 9.8 s). The starts after the first, and their hold
    passes, get 1 / ``STARTS_PARTS`` of the time to the deadline (a hold pass can take
    seconds: 5.7-9.9 s on a 12-layer GPT-2 at op level); each schedule is held once."""
    starts = ([] if known.kept is None else [known.kept]) + list(known.other_kept)
    best, until, held = None, _share_of(deadline, STARTS_PARTS), set()
    for k, kept in enumerate(starts):
        if k and past(until):
            break
        found, _ = plan.attempt(set(kept), budget)
        key = None if found is None else hash(found[2].tobytes())
        if key is not None and key not in held:
            held.add(key)
            best = _cheaper(best, _hold(plan, budget, found, until if k else deadline,
                                        bound=known.value))
        if _proven(best, known.value):
            break
    return best


def _from_bound(plan: "Plan", budget: float, kept: frozenset[int] | None,
                deadline: float, bound: float) -> tuple | None:
    """Where the bound's own schedule goes over the budget: its peak lowered first
    (``descent.descend``, cost-aware, at most ``GROW_SHARE`` of the time left), then the hold
    pass; None if that does not fit. fcn_resnet50 at module level, 60%, from 24.9 MiB (budget
    22.2) to a schedule of 1.0371 of the total in 2.5 s, 1.0180 after the hold pass
    (retention's best before: 1.0418; bound 1.0094)."""
    if kept is None or budget < known_floor(plan.graph):
        return None
    now = time.perf_counter()
    return _lowered(plan, budget, plan.schedule(set(kept))[1], set(kept),
                    now + GROW_SHARE * max(0.0, deadline - now), deadline, bound)


def _from_baseline(plan: "Plan", budget: float, deadline: float, bound: float) -> tuple | None:
    """Where no classic baseline fits the budget: the one whose schedule peaks lowest, its peak
    lowered (``descent.descend``, cost-aware, to ``deadline``) until it fits, then the hold
    pass with the time left; None where it does not fit, where a baseline fits (checkpoint-
    all's peak first), where the budget is below the least peak, or where the baselines took
    the time to ``deadline``. ``solve`` runs it first, with 1 / ``FROM_BASELINE_PARTS`` of its
    time, from ``FROM_BASELINE_LEAST_SECONDS`` on: a 12-layer GPT-2 at op level, 10%
    (bench/graphs/gpt2_12-op.json), where the lowest baseline peaks at 1.02 times the budget,
    its descent fits at 1.553 of the total cost (1.7 s), 1.322 after the hold pass (1.7 s);
    after the knapsacks (20 of retention's 30 s) it got no time, nor after the hold pass of
    the bound's start (all of it, in one of two calls), and auto with 60 s returned
    2.786-3.106 (bench/results/fast_notes.md, session 34). The descent once had half the
    time: with auto's 30 s on fcn_resnet50 at op level, 30%, 5 of 8 calls found no
    schedule (min_budget's 2.443 of the total, the others 1.1627). Traced, the descent fitted
    after 1.84 s in one call and stopped at 1.42 s without fitting in another; with all its
    time it fits after 2.1-2.2 s (session 46)."""
    from remat.solvers.base import CLASSIC
    from remat.solvers.min_budget import smallest_baseline

    graph = plan.graph
    if budget < known_floor(graph) or checkpoint_all_peak(graph) <= budget or past(deadline):
        return None
    peak, _, S = smallest_baseline(graph, FROM_BASELINE_SECONDS, CLASSIC)
    if peak <= budget or past(deadline):
        return None
    return _lowered(plan, budget, S, set(), deadline, deadline, bound)


def _from_given(plan: "Plan", budget: float, given: Solution | None, deadline: float,
                bound: float) -> tuple | None:
    """The caller's schedule (``options.initial``: auto's cheapest so far), tightened, then
    the hold pass to ``deadline``; None without one, or where it does not fit."""
    if given is None or given.S is None or not given.feasible:
        return None
    R, S = tighten(plan.graph, given.S)
    sim = plan.price(R, S)
    if sim.peak_memory > budget:
        return None
    return _hold(plan, budget, (sim.compute_cost, R, S, set()), deadline, bound=bound)


def _selective(plan: "Plan", budget: float, deadline: float, bound: float) -> tuple | None:
    """Selective checkpointing as a start: every gap kept but those across the loss (from the
    forward pass into the backward) of the values cheapest to drop per byte, dropped
    ``1 / SELECTIVE_STEPS`` of them at a time until the schedule fits, then the hold pass,
    which leaves one computation per dropped value where memory allows. Two orders, the
    cheaper schedule kept: by ``Plan.drop_costs`` first, with half the time to ``deadline``,
    then by ``Plan.rebuild_costs`` (on a 12-layer GPT-2 at op level 1.2174 / 1.3208 of the
    total cost at 20%, 1.0238 / 1.0171 at 50%; gpt2 at op level, 30%: 1.2917 / 1.2000).
    None where the graph has no loss or neither order gives a schedule (``_dropped``)."""
    if plan.graph.loss_node is None:
        return None
    first = _dropped(plan, budget, _share_of(deadline, 2), bound, plan.drop_costs)
    if _proven(first, bound):
        return first
    return _cheaper(first, _dropped(plan, budget, deadline, bound, plan.rebuild_costs))


def _dropped(plan: "Plan", budget: float, deadline: float, bound: float,
             costs) -> tuple | None:
    """``_selective`` in one order: ``costs(kept, across)`` prices dropping each gap across
    the loss given those kept so far, computed again after each step (dropping ``h.k`` of a
    transformer makes ``h.k+1`` dear); then the hold pass to ``deadline``. None where
    dropping all of them does not fit, where the steps left would not end by ``deadline``
    at the pace of those before (then little time is lost: with auto's 1 s on
    random_dag(500) at 10%, its 32 steps take 0.6 s, and the knapsacks after it need the
    time), with no step at all where ``deadline`` has passed (one step takes 0.05-0.61 s on
    linear(1024-4096))."""
    graph, loss = plan.graph, plan.graph.loss_node
    across = [k for k, (_, first, last) in enumerate(plan.gaps) if first <= loss <= last]
    step, kept = max(1, len(across) // SELECTIVE_STEPS), set(range(len(plan.gaps)))
    began, steps = time.perf_counter(), 0
    while across and not past(deadline):
        weights = costs(kept, across)
        across.sort(key=lambda k: weights[k] / graph.mem[plan.gaps[k][0]])
        kept.difference_update(across[:step])
        del across[:step]
        found, _ = plan.attempt(kept, budget)
        if found is not None:
            return _hold(plan, budget, found, deadline, bound=bound)
        now, steps = time.perf_counter(), steps + 1
        if now + (now - began) / steps * math.ceil(len(across) / step) > deadline:
            return None  # the steps left, at the pace so far, would not end in time
    return None


SELECTIVE_STEPS = 32
"""``_selective`` drops the gaps across the loss in about this many steps."""
SELECTIVE_PARTS = 2
"""``_selective`` gets 1 / this of the time left to the end of the starts. With a quarter,
auto's 30 s on a 12-layer GPT-2 at op level, 20%, gave it 1.1 s, 0.55 s per order, and its
hold pass stopped at 1.2263 of the total cost; with half, 2.4 s and 1.2174
(bench/results/fast_notes.md, session 46)."""


def _lowered(plan: "Plan", budget: float, S: np.ndarray, kept: set[int], until: float,
             deadline: float, bound: float) -> tuple | None:
    """Schedule ``S`` with its peak lowered until it fits (``descent.descend``, cost-aware,
    to ``until``), then the hold pass to ``deadline``, recorded with the gaps ``kept``; None
    if the descent does not fit it."""
    point = descend(plan.graph, S, budget, until, cheap=True)
    if not point.fits(budget):
        return None
    found = point.sim.compute_cost, point.R, point.S, kept
    return _hold(plan, budget, found, deadline, bound=bound)


FROM_BASELINE_SECONDS = 1.0
"""The time limit of each classic baseline call in ``_from_baseline`` (they take milliseconds
to a second; the sqrt(n) ones and checkpoint-all do not look at it)."""
FROM_BASELINE_PARTS = 4
"""``_from_baseline`` gets 1 / this of retention's time, first (the baselines it runs may
take more). Where the bound's own start would prove the schedule at once, that is time
spent for nothing: the tiny U-Net at op level, 60%, proven in 1.11 / 0.90 s with limits of
10 / 30 s, 0.85 / 0.68 s before (one run each, with a test run beside them)."""
FROM_BASELINE_LEAST_SECONDS = 10.0
"""The least time limit with which retention tries ``_from_baseline``. In auto's sweep with
1 s, with it at every limit: 8 calls more than 0.25 s late instead of 0 (the slowest 1.53
s), and random_dag(100) 20% and random_dag(250) 10% without a schedule (session 34). The
baselines it runs first do not look at the clock but take 0.01-0.33 s on the sweep's
graphs; the descent after them is the slow part: without the gate, none of the seven rows
that auto left without a schedule at 1 s got one at 1 or 2 s that it lacked with the gate
(bench/results/fast_notes.md, session 35)."""


def _grow(plan: "Plan", budget: float, best: tuple, weights: np.ndarray,
          deadline: float, bound: float = -math.inf) -> tuple:
    """Hill climbing from the best schedule: keep one more gap (dearest to rebuild first)
    whenever that lowers the cost and still fits, until a pass changes nothing or the cost
    meets ``bound`` (proven optimal)."""
    cost, R, S, kept = best
    order = sorted(set(range(len(plan.gaps))) - kept, key=lambda k: -weights[k])
    improved = True
    while improved and not past(deadline):
        improved = False
        for k in order:
            if past(deadline) or meets(cost, bound):
                break
            if k in kept:
                continue
            found, _ = plan.attempt(kept | {k}, budget)
            if found is not None and found[0] < cost:
                (cost, R, S, kept), improved = found, True
    return cost, R, S, kept


def _hold(plan: "Plan", budget: float, best: tuple, deadline: float,
          window: tuple[int, int] | None = None, bound: float = -math.inf) -> tuple:
    """Hill climbing on the schedule itself: instead of computing a value again in a later
    stage, keep it from its previous computation (with whatever it no longer needs rebuilt),
    dearest recomputation first, whenever that lowers the cost and still fits. It reaches
    what gaps cannot express: an ancestor rebuilt for one value and kept for the next.
    ``window`` (first, end): only moves that keep a value across a stage from first
    through end. Each round first tries every repeated rebuild at once (``_hold_repeats``).
    It stops once the cost meets ``bound`` (proven optimal: on heterogeneous linear(384) at
    30% of its budget range, before that move, after 270 of the 401 simulations retention
    made without that stop; with it, after one). Its first move (one simulation) is made even
    past ``deadline``, but not after Ctrl-C: auto with 1 s on random_dag(500) at 50% gave
    retention 0.1 s, spent on the schedule of the bound's knapsack (1.110534 of the total
    cost); that move alone reaches 1.070069, the optimum (bench/results/fast_notes.md,
    session 33)."""
    graph, (cost, R, S, kept) = plan.graph, best
    improved, rounds, peaks = True, 0, None
    while improved and may_go_on(deadline, rounds > 0):
        improved, rounds = False, rounds + 1
        found = _hold_repeats(plan, budget, R, S, window)
        if found is not None and found[0] < cost - 1e-12 * abs(cost):
            cost, R, S, peaks = found
        for t, v, _ in _recomputations(graph, R):
            if past(deadline) or meets(cost, bound):
                break
            if not R[t, v]:  # an earlier move removed it
                continue
            before = _held_from(R, t, v, window)
            if before is None:
                continue
            S_try = S.copy()
            S_try[before + 1:t + 1, v] = True
            R_try, S_try = tighten(graph, S_try, (R, S))
            if peaks is None:  # the start's, not counted as work: the caller priced it
                peaks = stage_peaks(graph, R, S)
            fitting, cost_try, peaks_try = plan.reprice(R_try, S_try, (R, S, peaks), budget)
            if fitting and cost_try < cost - 1e-12 * abs(cost):
                cost, R, S, peaks, improved = cost_try, R_try, S_try, peaks_try, True
    return cost, R, S, kept


def _hold_repeats(plan: "Plan", budget: float, R: np.ndarray, S: np.ndarray,
                  window: tuple[int, int] | None) -> tuple | None:
    """``_hold``'s move for every computation after a recomputation at once: each such value
    kept from its previous computation: (cost, R, S, stage peaks), or None if that does not
    fit. The schedule of a knapsack's gaps rebuilds a dropped value in the stage that reads it
    after the gap, from the nearest value kept, and drops what it rebuilt on the way: on a
    chain, a run of dropped activations is rebuilt once per reader. On heterogeneous
    linear(512) at 30% of its budget range, 1.368 of the total cost; one move to 1.0969, the
    optimum, where the moves one at a time took 362 simulations (10 s)."""
    S_try, moved = S.copy(), False
    for t, v, before in _recomputations(plan.graph, R):
        if _outside(t, before, window) or before == v:
            continue  # v's first computation: keeping it from there undoes the drop
        S_try[before + 1:t + 1, v] = moved = True
    if not moved:
        return None
    R_try, S_try = tighten(plan.graph, S_try, (R, S))
    sim = plan.price(R_try, S_try)
    if sim.peak_memory > budget:
        return None
    return sim.compute_cost, R_try, S_try, sim.stage_peaks(plan.graph.size)


def _held_from(R: np.ndarray, t: int, v: int, window: tuple[int, int] | None) -> int | None:
    """The stage of v's computation before stage t, from which a hold move keeps it; None
    where that move leaves ``window`` (``_hold``)."""
    before = int(np.flatnonzero(R[:t, v])[-1])
    return None if _outside(t, before, window) else before


def _outside(t: int, before: int, window: tuple[int, int] | None) -> bool:
    """Whether keeping a value from stage ``before`` to stage t leaves ``window``."""
    return window is not None and (t < window[0] or before >= window[1])


RESTART_GAP = 1e-3
"""The relative gap within which ``_restart`` solves its knapsacks: their weights are random
factors of the costs anyway. Six such knapsacks took 0.075 s each instead of 0.160 solved to
the optimum on a 12-layer GPT-2 at op level, 30%, and 0.307 instead of 0.793 on
random_dag(500) at 40%, at most 0.1% below it (bench/results/fast_notes.md, session 39)."""
KICKS = 3
"""Values whose residency one kick of ``_search`` drops."""
STALL = 30
"""Tries of each kind of move in a row without a better schedule that end ``_search``, once
the work since its last improvement is also more than the work it took to get there. On
gpt2 at module level, 40%, 15 s, seeds 0-3: 1.1237/1.1149/1.1436/1.1330 of the total with 30
tries of either kind in a row, 1.1147/1.1147/1.1436/1.1150 with this rule. Searching to the
deadline wherever the gap is over 1% instead made the 8-layer chain case of
test_chain_dp_matches_milp take 10.2 s instead of 1.4 s: milp's warm start calls this
without a time limit, so the search ran its full ``GROW_SECONDS``."""


def _search(plan: "Plan", budget: float, best: tuple, deadline: float,
            seed: int | list[int], threads, bound: float, report=_silent) -> tuple:
    """Iterated local search until the deadline, until it stalls (``STALL``), or until the
    best meets ``bound`` (proven optimal): kick the best schedule (drop a few values from
    a random stage of their residency on, then the hold pass) or restart from the knapsack
    with randomly scaled weights (then both passes), each kind of move given the same work
    (``Plan.work``: schedules priced, knapsacks solved), so the cheaper runs more often. Work,
    unlike seconds, does not depend on the machine: a seed gives the same schedule on every
    run unless a deadline cuts in. Measured on the 9 cases of bench/results/bounds.csv still
    over 1% (a one-off script, 20 s each): kicks alone took gpt2 module 60% from 1.0405 to
    1.0214, random weights alone resnet50 module 40% from 1.0361 to 1.0306 and U-Net op 80%
    from 1.0165 to 1.0052. Taking turns, restarts (3x dearer there) held gpt2 module 60% at
    1.0405 for 30 s; sharing seconds, it reached 1.0214 (proven optimal) in 1.6 s; sharing
    work, 1.021659 (0.025% above the bound) at limits of 14 and 30 s alike. Each better
    schedule goes to ``report`` (``_reporter``)."""
    rng = np.random.default_rng(seed)
    stall, spent = [0, 0], [0, 0]  # failed tries and work (plan.work): of kicks, of restarts
    start = last = plan.work  # last: when the best last improved
    while not past(deadline) and not meets(best[0], bound) and \
            (min(stall) < STALL or plan.work - last < last - start):
        move, began = int(spent[1] < spent[0]), plan.work
        if move == 0:
            found = _kick(plan, budget, best, rng, deadline, bound)
        else:
            found = _restart(plan, budget, rng, deadline, threads, bound)
        spent[move] += plan.work - began
        if found is not None and found[0] < best[0] - 1e-12 * abs(best[0]):
            best, stall, last = found, [0, 0], plan.work
            report(best)
        else:
            stall[move] += 1
    return best


def _kick(plan: "Plan", budget: float, best: tuple, rng, deadline: float,
          bound: float = -math.inf):
    """``best`` with ``KICKS`` random values dropped from a random resident stage on, then
    the hold pass over the stages that freed; None if it does not fit, decided before the
    hold pass, which only takes moves that fit (on random_dag(250) at 40% one pass over such
    a kick took 21 s of 30)."""
    graph, (_, R, S, kept) = plan.graph, best
    base, S = (R, S), S.copy()
    values = [v for v in np.flatnonzero(S.any(axis=0)) if graph.cost[v] > 0]
    if not values:
        return None
    first, last = graph.size, 0
    for v in rng.choice(values, size=min(KICKS, len(values)), replace=False):
        stages = np.flatnonzero(S[:, v])
        start = stages[rng.integers(len(stages))]
        S[start:stages[-1] + 1, v] = False
        first, last = min(first, start), max(last, stages[-1])
    R, S = tighten(graph, S, base)
    sim = plan.price(R, S)
    if sim.peak_memory > budget:  # the hold pass only takes moves that fit
        return None
    return _hold(plan, budget, (sim.compute_cost, R, S, kept), deadline,
                 window=(first, last + 1), bound=bound)


def _restart(plan: "Plan", budget: float, rng, deadline: float, threads,
             bound: float = -math.inf):
    """The knapsack with each gap's weight scaled by a random factor (log-normal), solved
    within ``RESTART_GAP``, then both hill-climbing passes; None if nothing fits."""
    weights = plan.own_costs() * rng.lognormal(0.0, 1.0, len(plan.gaps))
    found, _, _ = _fit(plan, budget, weights, deadline, threads, RESTART_GAP)
    if found is None:
        return None
    now = time.perf_counter()
    found = _grow(plan, budget, found, weights, now + GROW_SHARE * max(0.0, deadline - now),
                  bound)
    return _hold(plan, budget, found, deadline, bound=bound)


def _recomputations(graph: RematGraph, R: np.ndarray) -> list[tuple[int, int, int]]:
    """(stage, value, stage of the value's computation before) of every computation after the
    first, dearest first (ties by stage, then value). In numpy: a schedule of linear(2048,
    unit) with 1M recomputations took 5.3 s in a Python loop, and finding each one's previous
    computation again took 22 s in ``_hold_repeats``."""
    values, stages = nonzero(R.T)  # by value, then stage
    later = np.zeros(len(values), dtype=bool)
    later[1:] = values[1:] == values[:-1]
    before = np.concatenate(([-1], stages[:-1]))[later]
    values, stages = values[later], stages[later]
    order = np.lexsort((values, stages, -graph.cost[values]))
    return list(zip(stages[order].tolist(), values[order].tolist(), before[order].tolist()))


class Plan:
    """Schedules from the set of kept gaps (``remat.solvers.bounds.gaps``): a value is resident
    from its computation to its last read except across the gaps not kept, and computed again
    in the stage that reads it after each of those."""

    def __init__(self, graph: RematGraph):
        self.graph = graph
        self.gaps = gaps(graph)
        self.work = 0  # schedules priced and knapsacks solved: what ``_search`` shares out
        self.lowest: tuple[float, np.ndarray | None] = (math.inf, None)  # peak, S of the lowest
        self.whole = np.zeros((graph.size, graph.size), dtype=bool)
        for v in range(graph.size):
            if graph.users[v]:
                self.whole[v + 1:max(graph.users[v]) + 1, v] = True
            if graph.cost[v] <= 0 and graph.mem[v] > 0:  # free to recompute: drop every run
                for first, last in runs(graph, v):
                    self.whole[first:last + 2, v] = False

    def own_costs(self) -> np.ndarray:
        return np.array([self.graph.cost[v] for v, _, _ in self.gaps], dtype=float)

    def resident(self, kept: set[int]) -> np.ndarray:
        """S before ``tighten``: resident at each stage's start by the plan."""
        S = self.whole.copy()
        for k, (v, first, last) in enumerate(self.gaps):
            if k not in kept:
                S[first:last + 2, v] = False
        return S

    def schedule(self, kept: set[int]) -> tuple[np.ndarray, np.ndarray]:
        return tighten(self.graph, self.resident(kept))

    def price(self, R: np.ndarray, S: np.ndarray):
        """The simulator's verdict on (R, S), counted in ``work``."""
        self.work += 1
        return simulate(self.graph, R, S)

    def reprice(self, R: np.ndarray, S: np.ndarray, was: tuple, budget: float):
        """(whether (R, S) fits ``budget``, its cost, its stage peaks), where ``was`` is (R, S,
        stage peaks) of a valid schedule that differs from it in a few stages: only the stages
        whose R, S or next S changed are replayed (``simulate.restaged``; a hold move on a
        12-layer GPT-2 at op level replays 20 of its 679 stages at the median, 104 on
        average). Counted in ``work`` as ``price``; the verdict is ``descent.fits``'s."""
        self.work += 1
        peaks = restaged(self.graph, R, S, was)
        return fits(self.graph, R, S, peaks, budget), compute_cost(self.graph, R), peaks

    def attempt(self, kept: set[int], budget: float):
        """The schedule of ``kept``, priced: ((cost, R, S, kept) if it fits the budget, else
        None; the simulation)."""
        R, S = self.schedule(kept)
        sim = self.price(R, S)
        if sim.peak_memory < self.lowest[0]:
            self.lowest = (sim.peak_memory, S)
        return ((sim.compute_cost, R, S, kept) if sim.peak_memory <= budget else None), sim

    def rebuild_costs(self, kept: set[int], only: list[int] | None = None) -> np.ndarray:
        """Per gap, what dropping it costs given the kept gaps: v itself plus every ancestor
        not resident at the start of the stage that reads v after the gap, found through the
        ancestors that must be rebuilt as well. ``only``: just these gaps (the others keep
        their own cost)."""
        return self._rebuild_costs(self.resident(kept), only)

    def _rebuild_costs(self, S: np.ndarray, only: list[int] | None) -> np.ndarray:
        """``rebuild_costs`` under residency S (``resident``)."""
        weights = self.own_costs()
        for k in range(len(self.gaps)) if only is None else only:
            v, _, last = self.gaps[k]
            rebuilt, _ = self._rebuild(S, v, last + 1)
            weights[k] += sum(self.graph.cost[d] for d in rebuilt)
        return weights

    def drop_costs(self, kept: set[int], only: list[int]) -> np.ndarray:
        """Per gap in ``only``, what dropping it adds given the kept gaps: its rebuild cost
        (``rebuild_costs``) once for the stage that reads v after the gap, and once more for
        each other stage within the gap where the rebuild of a dropped gap reads v resident
        (dropping v makes that rebuild compute it too). ``rebuild_costs`` prices those later,
        once they are dropped themselves; on a 12-layer GPT-2 at op level, 20%, dropping the
        attention's softmax and mask before its scores made the scores of most blocks
        computed 3-4 times more (``_selective``: 1.3208 of the total cost with rebuild costs,
        1.2174 with these)."""
        S, reads = self.resident(kept), {}
        for j in set(range(len(self.gaps))) - set(kept):
            v, _, last = self.gaps[j]
            for d in self._rebuild(S, v, last + 1)[1]:
                reads.setdefault(d, set()).add(last + 1)
        costs = self._rebuild_costs(S, only)
        for k in only:
            v, first, last = self.gaps[k]
            costs[k] *= 1 + sum(first <= stage <= last for stage in reads.get(v, ()))
        return costs

    def _rebuild(self, S: np.ndarray, v: int, stage: int) -> tuple[set[int], set[int]]:
        """(the ancestors of v that computing it again at the start of ``stage`` computes
        again too: those not resident there, found through each other; the resident ones it
        reads) under residency S."""
        deps = self.graph.deps
        rebuilt, read, stack = set(), set(), list(deps[v])
        while stack:
            d = stack.pop()
            if d in rebuilt or d in read:
                continue
            if S[stage, d]:
                read.add(d)
                continue
            rebuilt.add(d)
            stack.extend(deps[d])
        return rebuilt, read
