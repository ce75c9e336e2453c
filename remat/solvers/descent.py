"""Peak descent: lower a schedule's peak until it fits a budget, cost aside.

``retention`` builds its schedules from kept gaps: a dropped value is computed again, with
its missing ancestors, in the stage that reads it. Within a stage nodes run in index order,
so such a rebuild can hold more at once than any single node needs: fcn_resnet50 at module
level rebuilds its bilinear head (four 2.625 MiB gathers, all computed before the first
subtraction reads two of them) and no gap choice fits 40% of its range. This local search
works on S itself, at the stages over the budget, with five moves on a value live at the
stage's peak:

- drop: free a resident value from this stage until the next stage that reads it (which
  then computes it again);
- trade: the same drop, but the value's inputs that the stage holds stay resident until that
  reader instead, so the reader rebuilds the value from them, not its whole ancestry (in the
  backward of fcn_resnet50's bilinear head at op level, autograd's order, a 2.6 MiB gradient
  freed and rebuilt later from the one it was computed from: the least peak found in 20 s
  went from 40.5% to 27.1% of its budget range, the pebbling floor 27.0%; bench/results/
  fast_notes.md, session 40);
- release: stop keeping a value the stage computes (and keeps) until the next stage that
  reads it, which then computes it again; and the same with its inputs kept there instead;
- hoist: compute a value the stage rebuilds one stage earlier and keep it into this one
  (spreading a rebuild over several stages);
- hold: keep a value the stage rebuilds from its previous computation instead.

Each step takes the move that lowers (peak, total overshoot of the budget) most, or (for
retention, ``cheap``) the one that adds the least cost per byte of overshoot removed; where no
single move helps, the best pair (any first move at the worst stage, then the best after it).
Every schedule is ``tighten``-ed (a move's from the schedule it moves, ``rs.tighten``'s
``base``) and priced by the simulator: a move's by replaying only the stages it changed, those
of ``BATCH`` moves at once (``simulate.restaged_all``), the whole simulation where asked for
(``Point.sim``).
"""
from __future__ import annotations

import math
from functools import cached_property
from itertools import islice
from typing import Iterator

import numpy as np

from remat.graph.core import RematGraph
from remat.schedule.rs import tighten
from remat.schedule.simulate import Simulation, compute_cost, restaged_all, simulate
from remat.solvers.base import past

STAGES = 4
"""Stages over the budget, worst first, whose moves one step tries."""
BATCH = 8
"""Moves priced together (``Point.moved``): their changed stages in one replay. Descents from
the lowest baseline at 10% of the budget range (one-off, bench/results/fast_notes.md, session
41): gpt2 at op level 1.1-1.4 s one move at a time, 0.6 s by 8, 0.6-0.7 by 16; random_dag(250)
4.4-4.9, 3.1-3.6, 4.3-4.5 s (larger batches replay more rows at once than the cache holds)."""
TOLERANCE = 1e-9
"""``fits`` leaves a peak this close to the budget (relative) to ``simulate``: stage peaks
replayed apart add bytes that are not whole numbers in another order."""


def fits(graph: RematGraph, R: np.ndarray, S: np.ndarray, peaks: np.ndarray,
         budget: float) -> bool:
    """Whether the schedule (R, S) with these stage peaks fits ``budget``, as ``simulate``
    says (it decides where the peak is within ``TOLERANCE`` of the budget)."""
    peak = _peak(graph, peaks)
    if math.isfinite(budget) and abs(peak - budget) <= TOLERANCE * budget:
        peak = simulate(graph, R, S).peak_memory
    return peak <= budget


def _peak(graph: RematGraph, peaks: np.ndarray) -> float:
    """The schedule's peak from its stage peaks: the largest, static memory at least."""
    return max(float(peaks.max()), float(graph.static_mem))


class Point:
    """A schedule (``tighten``-ed R, S), its stage peaks, cost and score: (peak, the sum over
    stages of how far each goes over ``budget``), lower is better. A start is simulated whole
    (``start``); a move from a point replays only the stages that differ from it (``moved``);
    the whole simulation (``sim``) is made where asked for."""

    def __init__(self, graph: RematGraph, R: np.ndarray, S: np.ndarray, peaks: np.ndarray,
                 budget: float):
        self.graph, self.R, self.S, self.peaks = graph, R, S, peaks
        self.cost = compute_cost(graph, R)
        over = np.maximum(peaks - budget, 0.0).sum()
        self.score = (_peak(graph, peaks), float(over))

    @classmethod
    def start(cls, graph: RematGraph, S: np.ndarray, budget: float) -> "Point":
        """The point of schedule ``S``, tightened and simulated whole."""
        R, S = tighten(graph, S)
        sim = simulate(graph, R, S)
        point = cls(graph, R, S, sim.stage_peaks(graph.size), budget)
        point.sim = sim
        return point

    @classmethod
    def moved(cls, graph: RematGraph, base: "Point", moves: Iterator[np.ndarray],
              budget: float, deadline: float | None) -> Iterator["Point"]:
        """The points of ``moves`` (S matrices) from ``base``, ``BATCH`` at a time: each
        tightened from it, their changed stages replayed at once; no move is tightened once
        ``deadline`` passes."""
        moves = iter(moves)
        while True:
            batch = []
            for S in islice(moves, BATCH):
                if past(deadline):
                    break
                batch.append(tighten(graph, S, (base.R, base.S)))
            if not batch:
                return
            for (R, S), peaks in zip(batch, restaged_all(graph, batch,
                                                         (base.R, base.S, base.peaks))):
                yield cls(graph, R, S, peaks, budget)

    @cached_property
    def sim(self) -> Simulation:
        return simulate(self.graph, self.R, self.S)

    def fits(self, budget: float) -> bool:
        return fits(self.graph, self.R, self.S, self.peaks, budget)

    def worst(self, budget: float, count: int) -> list[int]:
        """Up to ``count`` stages over ``budget``, highest peak first."""
        order = np.argsort(-self.peaks, kind="stable")[:count]
        return [int(t) for t in order if self.peaks[t] > budget]


def descend(graph: RematGraph, S: np.ndarray, budget: float, deadline: float | None,
            cheap: bool = False, enough: float | None = None) -> Point:
    """Lower the peak of schedule ``S`` until it fits ``budget`` (or ``enough``, if higher),
    no step helps, or ``deadline`` (a ``time.perf_counter()`` value) passes; returns the last
    schedule. Each step takes the move that lowers the score most; with ``cheap``, the one
    that adds the least cost per byte of overshoot it removes (retention: fcn_resnet50 at
    module level, 60%, from the bound's schedule: 1.0180 of the total after the hold pass,
    1.0240 by score; 40%: 1.1656 against 1.1804). The score counts the overshoot of
    ``budget`` even where ``enough`` stops the descent: ``min_budget``'s descent toward the
    pebbling floor, stopped at auto's budget, fits fcn_resnet50 at op level, 30% (autograd's
    order, 12 s), where scored against that budget it stops 8.6% above it (19247568 B)."""
    rank = _by_cost if cheap else _by_score
    enough = budget if enough is None else max(budget, enough)
    point = Point.start(graph, S, budget)
    while not point.fits(enough) and not past(deadline):
        step, _ = _best_step(graph, point, point, budget, rank, deadline)
        if step is None:
            step = _best_pair(graph, point, budget, rank, deadline)
        if step is None:
            break
        point = step
    return point


def _by_score(base: Point, found: Point):
    """Lower (peak, overshoot) first; None where ``found`` does not score below ``base``."""
    return found.score if found.score < base.score else None


def _by_cost(base: Point, found: Point):
    """The cost ``found`` adds per byte of overshoot it removes; None where it removes none."""
    removed = base.score[1] - found.score[1]
    if removed <= 0:
        return None
    return max(found.cost - base.cost, 0.0) / removed


def _best_step(graph: RematGraph, base: Point, point: Point, budget: float, rank,
               deadline: float | None) -> tuple[Point | None, object]:
    """(the best schedule, its rank): the least ``rank`` against ``base`` that one move of
    ``point``, at its stages over the budget (worst first, ``STAGES`` of them), reaches;
    (None, None) if none ranks."""
    best, least = None, None
    for t in point.worst(budget, STAGES):
        for found in Point.moved(graph, point, _moves(graph, point, t), budget, deadline):
            key = rank(base, found)
            if key is not None and (least is None or key < least):
                best, least = found, key
    return best, least


def _best_pair(graph: RematGraph, point: Point, budget: float, rank,
               deadline: float | None) -> Point | None:
    """Two moves: any at the worst stage, then the best (``_best_step``) after it; the best
    pair, ranked against ``point``."""
    best, least = None, None
    first_moves = _moves(graph, point, point.worst(budget, 1)[0])
    for first in Point.moved(graph, point, first_moves, budget, deadline):
        found, key = _best_step(graph, point, first, budget, rank, deadline)
        if key is not None and (least is None or key < least):
            best, least = found, key
    return best


def _moves(graph: RematGraph, point: Point, t: int) -> Iterator[np.ndarray]:
    """The S of each drop, trade, release, hoist and hold move at stage ``t`` (module
    docstring) on the values live at that stage's peak."""
    R, S = point.R, point.S
    for v in point.sim.live_at_peak(t):
        if S[t, v]:
            yield from _drops(graph, R, S, t, v)
            continue
        if not R[t, v]:
            continue
        if t + 1 < graph.size and S[t + 1, v]:
            yield from _releases(graph, R, S, t, v)
        if v == t:
            continue
        if t > 0 and not R[t - 1, v] and not S[t - 1, v]:
            hoisted = S.copy()
            hoisted[t, v] = True
            yield hoisted
        earlier = np.flatnonzero(R[:t, v])
        if earlier.size:
            held = S.copy()
            held[earlier[-1] + 1:t + 1, v] = True
            yield held


def _drops(graph: RematGraph, R: np.ndarray, S: np.ndarray, t: int,
           v: int) -> Iterator[np.ndarray]:
    """The drop and trade moves of ``v``, resident at stage ``t``: freed up to its next
    reader, then the same with its inputs alive in stage ``t`` kept to that reader."""
    dropped, reader = _dropped(graph, R, S, t, v)
    yield dropped
    alive = [d for d in graph.deps[v] if S[t, d] or R[t, d]]
    yield from _holding(dropped, alive, t + 1, reader)


def _releases(graph: RematGraph, R: np.ndarray, S: np.ndarray, t: int,
              v: int) -> Iterator[np.ndarray]:
    """The release moves of ``v``, computed in stage ``t`` and kept into ``t + 1``: kept no
    longer, up to its next reader, then the same with its inputs kept to that reader."""
    released, reader = _dropped(graph, R, S, t + 1, v)
    yield released
    yield from _holding(released, list(graph.deps[v]), t + 1, reader)


def _holding(S: np.ndarray, values: list[int], first: int,
             last: int) -> Iterator[np.ndarray]:
    """S with ``values`` resident from stage ``first`` to ``last`` (the trade and release
    moves: a freed value's inputs kept to the reader that computes it again); nothing where
    they all are already."""
    rows = slice(first, last + 1)
    if values and not S[rows, values].all():
        held = S.copy()
        held[rows, values] = True
        yield held


def _dropped(graph: RematGraph, R: np.ndarray, S: np.ndarray, t: int,
             v: int) -> tuple[np.ndarray, int]:
    """(S with ``v`` freed from stage ``t`` up to and including the next stage that reads it,
    that stage)."""
    resident = S[t:, v]
    stop = resident.size if resident.all() else int(np.argmin(resident))
    reads = R[t:t + stop, list(graph.users[v])].any(axis=1)  # a computation there reads v
    if reads.any():
        stop = int(np.argmax(reads)) + 1
    dropped = S.copy()
    dropped[t:t + stop, v] = False
    return dropped, t + max(stop - 1, 0)
