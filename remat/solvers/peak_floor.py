"""A lower bound on the peak of every schedule of a graph, above ``peak_lower_bound``.

``peak_lower_bound`` counts one computation: node t with its inputs. Look instead at the
moment a set A of values is alive at once (each value's live copy computed at some earlier
moment) and take the value a in A whose copy was computed last. At that computation the rest
of A was already alive, and a's inputs were too, so memory was at least ``static + m(A - a
+ deps(a)) + m_a + w_a``, and the set ``A - a + deps(a)`` was alive at once before. So every
schedule, going back in time from the computation of node t (its inputs alive), follows a
path of such sets down to the empty set (values with no inputs read only static memory), and
its peak is at least the largest memory along that path. The least such largest memory over
all paths, F(t), is the weighted black pebbling number of t, where a value may be computed
any number of times; every schedule computes every node, so ``static + max_t F(t)`` is a
lower bound on its peak. The exhaustive search (tests/exhaustive.py) never finds a smaller
peak (tests/test_peak_floor.py).

The stages make the walk back longer. A schedule computes node t for the first time at the
end of stage t (``R[t, i] = 0`` for i > t, and a stage computes in index order, so node t
comes last in it), and never before. So going back from any moment, the walk meets the end
of each earlier stage j: node j computed with its inputs alive and the whole set alive too
(each of its values was computed before and is read after), so memory was at least ``static
+ m(A - j + deps(j)) + m_j + w_j``, and the walk goes on from ``A - j + deps(j)`` whether A
held j or not. Between two stage ends, the values the walk takes from the set were computed
in one stage, in index order: each is below the one taken before it. (The search also lets a
walk skip a stage end, and stop at the empty set before the first stage: more walks, so a
lower G, still a bound.) The least largest memory over such walks, G(t), is at least F(t)
(drop the stage ends where A does not hold j: what is left is a walk of F's, over subsets),
and ``static + max_t G(t)`` bounds the peak the same way; ``_staged`` searches it. Where
this matters: GPT-2 at op level (129 nodes), the backward of the second block's attention
scores (node 80) is computed last in its stage, with what the stages after it read still
alive: 1708032 -> 1835008 B above static (2844680 -> 2971656 B in all), which proves its 20%
budget (2962850 B) infeasible, where no search had found a schedule either; random_dag(11)
28 -> 29 MiB, the least peak the descent finds, so ``min_budget`` is proven there at once.
The exhaustive least peak of tiny graphs is never below it (tests/test_peak_floor.py).

F(t) is a bottleneck shortest path over sets (bit masks), found by a best-first search that
pops sets in increasing order of "the largest memory so far", raised by ``max F(a)`` over the
set's values (no path through the set can do better: making any one value alive is part of
making the set alive). Values are done in index order, so every value of a set has its F.
A set popped at a key no smaller than the best key of a set one value smaller is skipped
(``_dominated``): a path on from the larger set, step by step, is matched by one from the
smaller set that holds at each step a subset of what it holds. On plateaus (many sets at the
same key) this is most of the search: random_dag(22), seed 2, exact in 0.68 s (50.5 s
without it); the exact values of 60 random DAGs of 10-26 nodes are unchanged by it.
Each pass searches every open value by pebbling alone (``_bottleneck``), then with the
stages (``_staged``, the same search over states of a set and where in the stages it is). A
search is cut after a number of sets (``FIRST_STATES``, four times more on each pass while
time is left); a cut search still proves the value it popped last, so the bound holds
whenever it stops. Only the largest F counts, so later passes take the cut values largest
first and drop those that one path (``_upper``) keeps at or below it. ``peak_floor`` caches
its result per graph.

Measured (``bench/bench_peak_floor.py``, bench/results/peak_floor.csv; bytes, static
included; one run, 2 shared cores): random_dag(20) 26214400 (one node's operands) ->
30408704, exact in 0.03 s, where the min-peak MILP (one thread) left its bound at 26214400
after 900 s (least known peak 35651584); gpt2 at module level 3545096 -> 3676168 in 1 s (20
s before ``_dominated``), its least known peak, so ``min_budget`` is proven there;
fcn_resnet50 at op level 13742544 -> 16495056 in 1 s (least known 19294672); resnet50 at
module and op level +131 kB in 1 s (exact in 13.4 s at module level); random_dag(250) +1.5 MiB
in 1 s; random_dag(30) +3 MiB, exact in 0.4 s. It adds nothing to the operand bound on VGG-16,
U-Net, MobileNetV2 (exact in under a second on VGG-16 and U-Net's module graph, in 3.8 s and
16.8 s on MobileNetV2's module and op graphs), fcn_resnet50 (module) and random_dag(500) in 20 s.
With the stages (bench/results/peak_floor_s42_{before,after}.csv, 1 and 5 s, the same day):
random_dag(20) 30408704 -> 30932992 (exact in 0.3 s, 0.15 s before), random_dag(30) 34603008
-> 36175872 (no longer exact within 5 s), gpt2 at op level 2844680 -> 2971656 in 1 s,
random_dag(100) 41943040 -> 44040192 in 5 s; the same values on the other graphs, but for
gpt2 at module level in 1 s, 3676168 -> 3598344 (the stages' passes take time from the plain
ones; 3676168 again in 5 s).
"""
from __future__ import annotations

import heapq
import itertools
import math
import time
import weakref
from dataclasses import dataclass

from remat.graph.core import RematGraph
from remat.solvers.base import deadline_of, past
from remat.solvers.bounds import peak_lower_bound

FIRST_STATES = 100
"""Sets each value's search may pop on the first pass (times four on each later pass). With
``_dominated``, 100 rather than 500 gets the first pass over all values sooner: resnet50 at op
level reaches 6230408 B in 1 s (500: 2.5 s), random_dag(250) +1.5 MiB in 1 s (500: 5 s); U-Net
at op level no longer ends exact in 0.35 s (same value, cut)."""


@dataclass(frozen=True)
class PeakFloor:
    """No schedule of the graph peaks below ``value`` (bytes, static included). ``exact``: every
    value's searches finished, with the stages and without (``static + max_t G(t)`` itself, not
    a cut of it)."""

    value: float
    exact: bool
    seconds: float


FLOOR_SHARE = 0.05
"""Of a solver's time limit, what it gives the search (``floor_seconds``; cached per graph,
so a sweep pays once); ``FLOOR_SECONDS`` without a limit."""
FLOOR_SECONDS = 1.0

_CACHE: "weakref.WeakKeyDictionary[RematGraph, PeakFloor]" = weakref.WeakKeyDictionary()
_REACHED: "weakref.WeakKeyDictionary[RematGraph, float]" = weakref.WeakKeyDictionary()


def below_floor(graph: RematGraph, budget: float, time_limit: float | None,
                search: bool = True) -> float | None:
    """The proven least peak (bytes) where ``budget`` is below it, else None: no schedule of
    ``graph`` fits then. ``peak_lower_bound`` first (no search), then ``peak_floor`` (if
    ``search``), unless a schedule is known to peak within the budget (``reached``)."""
    operands = peak_lower_bound(graph)
    if budget < operands:
        return operands
    if not search or budget >= _REACHED.get(graph, math.inf):
        return None  # some schedule fits: no floor is above the budget
    floor = peak_floor(graph, floor_seconds(time_limit)).value
    return floor if budget < floor else None


def floor_seconds(time_limit: float | None) -> float:
    """The seconds a solver with ``time_limit`` gives ``peak_floor`` before its own work."""
    return FLOOR_SECONDS if time_limit is None else FLOOR_SHARE * time_limit


def reached(graph: RematGraph, peak: float) -> None:
    """Record that a schedule of ``graph`` peaks at ``peak`` bytes (simulated): no floor is
    above it, so ``below_floor`` needs no search at budgets from it up, and where it meets
    ``peak_lower_bound`` that is the least peak, exact. On chains the least-peak persistent
    schedule does (every ``linear(n)`` measured, n = 8-384, unit or not), which saves the
    search ``floor_seconds`` of auto's limit (1.5 s of 30; the search does not finish on
    linear(128) in that time)."""
    _REACHED[graph] = min(peak, _REACHED.get(graph, math.inf))
    operands = peak_lower_bound(graph)
    if peak <= operands:
        _CACHE[graph] = PeakFloor(operands, True, 0.0)


def known_floor(graph: RematGraph) -> float:
    """The best proven least peak known without a search: ``peak_lower_bound``, or the cached
    ``peak_floor`` of an earlier call (auto's, milp's, min_budget's) where that is higher."""
    known = _CACHE.get(graph)
    return max(peak_lower_bound(graph), -math.inf if known is None else known.value)


def peak_floor(graph: RematGraph, time_limit: float | None = 1.0) -> PeakFloor:
    """The pebbling lower bound on the peak of every schedule (module docstring), at least
    ``peak_lower_bound``; searched for at most ``time_limit`` seconds (None: to the end), or
    until Ctrl-C (``base.past``). Cached per graph; a cut result is searched again when more
    time is asked for."""
    known = _CACHE.get(graph)
    asked = math.inf if time_limit is None else time_limit
    if known is not None and (known.exact or asked <= known.seconds):
        return known
    found = _search(graph, time_limit)
    if known is not None and known.value > found.value:
        found = PeakFloor(known.value, found.exact, found.seconds)
    _CACHE[graph] = found
    return found


def _search(graph: RematGraph, time_limit: float | None) -> PeakFloor:
    began = time.perf_counter()
    deadline = deadline_of(time_limit)
    mem = [float(m) for m in graph.mem]
    own = [float(m) + float(w) for m, w in zip(graph.mem, graph.workspace)]
    inputs = [sum(1 << d for d in graph.deps[v]) for v in range(graph.size)]
    floor = [0.0] * graph.size
    todo = {search: list(range(graph.size)) for search in (_bottleneck, _staged)}
    upper: dict[int, float] = {}  # _upper of each value, once
    cap = FIRST_STATES
    while any(todo.values()) and not past(deadline):
        for search, targets in todo.items():
            cut = _pass(search, targets, cap, (mem, own, inputs, floor), deadline)
            # only the largest F counts: a value some path keeps at or below it is done
            most = max(floor, default=0.0)
            still_open = _open(cut, most, upper, (mem, own, inputs), deadline)
            if past(deadline):  # no next pass: exact unless one value is open
                known_open = any(todo[other] for other in todo if other is not search)
                todo[search] = [] if known_open else list(itertools.islice(still_open, 1))
            else:
                todo[search] = sorted(still_open, key=lambda t: -floor[t])
        cap *= 4
    value = max(peak_lower_bound(graph), graph.static_mem + max(floor, default=0.0))
    return PeakFloor(value, not any(todo.values()), time.perf_counter() - began)


def _open(cut: list[int], most: float, upper: dict[int, float], data: tuple,
          deadline: float | None):
    """The values of ``cut`` that no path keeps at or below ``most`` (``_upper``, computed once
    per value into ``upper``; past ``deadline``, a value not yet computed counts as open)."""
    for t in cut:
        if t not in upper:
            if past(deadline):
                yield t
                continue
            upper[t] = _upper(t, *data)
        if upper[t] > most:
            yield t


def _pass(search, targets: list[int], cap: int, data: tuple, deadline: float | None) -> list[int]:
    """Search each target for at most ``cap`` sets, raising ``floor`` (the last of ``data``) in
    place; the targets whose search was cut (all those not reached by ``deadline`` too)."""
    floor = data[-1]
    cut = []
    for k, t in enumerate(targets):
        if past(deadline):
            return cut + targets[k:]
        value, done = search(t, *data, cap, deadline)
        floor[t] = max(floor[t], value)
        if not done:
            cut.append(t)
    return cut


def _bottleneck(target: int, mem: list[float], own: list[float], inputs: list[int],
                floor: list[float], cap: int, deadline: float | None) -> tuple[float, bool]:
    """(F(target), True), or (a lower bound on it, False) when cut after ``cap`` sets or at
    ``deadline``. A set is a bit mask of values alive at once; its key is the largest memory
    on the best path to it so far, raised by its values' ``floor``."""
    start = inputs[target]
    start_mem = _mem(start, mem)
    first = max(start_mem + own[target], _largest(start, floor))
    heap, best, popped = [(first, start, start_mem)], {start: first}, 0
    while heap:
        key, alive, alive_mem = heapq.heappop(heap)
        if key > best[alive]:
            continue  # a better path reached this set since
        if not alive:
            return key, True
        if _dominated(alive, key, best):
            continue
        popped += 1
        if popped > cap or (not popped % 64 and past(deadline)):
            return key, False
        for a in _bits(alive):
            before = (alive & ~(1 << a)) | inputs[a]
            before_mem = alive_mem - mem[a] + _mem(inputs[a] & ~alive, mem)
            step = max(key, before_mem + own[a])
            if step < best.get(before, math.inf):
                step = max(step, _largest(before, floor))
                if step < best.get(before, math.inf):
                    best[before] = step
                    heapq.heappush(heap, (step, before, before_mem))
    return math.inf, True  # cannot happen: the empty set is always reachable


def _staged(target: int, mem: list[float], own: list[float], inputs: list[int],
            floor: list[float], cap: int, deadline: float | None) -> tuple[float, bool]:
    """(G(target), True), or a lower bound on it and False when cut: ``_bottleneck``'s search
    with the stages of a schedule in view (module docstring). A state is (set, last, below):
    the set alive, within stage ``last + 1``, whose computations before this moment are
    below index ``below``; node ``last`` ends the stage before. The target is the last
    computation of its stage, with its inputs alive."""
    start = (inputs[target], target - 1, _below(inputs[target], target))
    start_mem = _mem(start[0], mem)
    first = max(start_mem + own[target], _largest(start[0], floor))
    heap, best, popped = [(first, start, start_mem)], {start: first}, 0
    while heap:
        key, state, alive_mem = heapq.heappop(heap)
        alive, last, below = state
        if key > best[state]:
            continue  # a better path reached this state since
        if not alive:
            return key, True
        if any(best.get(_without(state, a), math.inf) <= key for a in _bits(alive)):
            continue  # dominated, as in ``_dominated``
        popped += 1
        if popped > cap or (not popped % 64 and past(deadline)):
            return key, False
        for a, before, stage_end in _steps(alive, last, below, inputs):
            before_mem = alive_mem - mem[a] * (alive >> a & 1) + _mem(inputs[a] & ~alive, mem)
            step = max(key, before_mem + own[a])
            state = (before, last - stage_end, _below(before, a))
            if step < best.get(state, math.inf):
                step = max(step, _largest(before, floor))
                if step < best.get(state, math.inf):
                    best[state] = step
                    heapq.heappush(heap, (step, state, before_mem))
    return math.inf, True  # cannot happen: the empty set is always reachable


def _steps(alive: int, last: int, below: int, inputs: list[int]):
    """One step back in time: (node computed, the set alive before it, whether it is the end
    of the stage before). A value of the set computed earlier in this stage (below the
    computation after it), or node ``last``, which ends the stage before: alive with it are
    its inputs and the whole set, whether the set holds it or not."""
    for a in _bits(alive & ((1 << below) - 1)):
        yield a, (alive & ~(1 << a)) | inputs[a], False
    if last >= 0:
        yield last, (alive & ~(1 << last)) | inputs[last], True


def _below(alive: int, below: int) -> int:
    """``below`` as one key: above the set's highest value it allows nothing more."""
    return min(below, alive.bit_length())


def _without(state: tuple, a: int) -> tuple:
    alive, last, below = state
    smaller = alive & ~(1 << a)
    return smaller, last, _below(smaller, below)


def _dominated(alive: int, key: float, best: dict) -> bool:
    """True when a set one value smaller was reached at no larger key: every path on from
    ``alive`` has a counterpart from it, step by step no larger (a set's values only ever
    leave it, computed from inputs a subset would also hold), so ``alive`` adds nothing."""
    return any(best.get(alive & ~(1 << a), math.inf) <= key for a in _bits(alive))


def _upper(target: int, mem: list[float], own: list[float], inputs: list[int]) -> float:
    """The largest memory along one path (F(target) is at most it): the highest value of the
    set is always the one computed last (the plain forward order)."""
    alive = inputs[target]
    alive_mem = _mem(alive, mem)
    largest = alive_mem + own[target]
    while alive:
        a = alive.bit_length() - 1
        alive_mem += _mem(inputs[a] & ~alive, mem) - mem[a]
        alive = (alive & ~(1 << a)) | inputs[a]
        largest = max(largest, alive_mem + own[a])
    return largest


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _mem(mask: int, mem: list[float]) -> float:
    return sum(mem[v] for v in _bits(mask))


def _largest(mask: int, floor: list[float]) -> float:
    return max((floor[v] for v in _bits(mask)), default=0.0)
