"""The one simulator: applies DESIGN.md's memory rule to an R/S schedule.

Solvers, tests, benchmarks and the runtime all use it, so there is exactly one memory
accounting in remat. It also produces the ordered plan of compute/free steps the runtime runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Iterator, NamedTuple

import numpy as np

from remat.errors import InvalidScheduleError
from remat.graph.core import RematGraph


class Event(NamedTuple):
    """One step of the timeline: ``memory`` is the bytes in use right after it (for a
    compute: with the new output allocated, its inputs still alive and the node's transient
    workspace held, a peak candidate; the workspace is gone by the next event)."""

    stage: int
    action: str  # "compute" | "free"
    node: int
    memory: float


class Events(NamedTuple):
    """The timeline as arrays, in the order things happen: ``memory`` as in ``Event``."""

    stage: np.ndarray
    node: np.ndarray
    compute: np.ndarray  # bool: a computation, else a free
    memory: np.ndarray


@dataclass(frozen=True)
class Simulation:
    """What the simulator found. Unpacks as ``peak_memory, compute_cost, timeline``. Two
    simulations compare equal when their peak, cost and the peak's stage and node are equal
    (not their events)."""

    peak_memory: float
    compute_cost: float
    peak_stage: int
    peak_node: int
    events: Events = field(repr=False, compare=False)

    def __iter__(self) -> Iterator:
        return iter((self.peak_memory, self.compute_cost, self.timeline))

    @cached_property
    def timeline(self) -> tuple[Event, ...]:
        """Every step as an ``Event`` (built on first use: solvers only read the arrays)."""
        ev = self.events
        actions = np.where(ev.compute, "compute", "free").tolist()
        return tuple(map(Event, ev.stage.tolist(), actions, ev.node.tolist(),
                         ev.memory.tolist()))

    @property
    def plan(self) -> list[tuple[str, int]]:
        """The ordered steps ``[("compute", i) | ("free", i), ...]``."""
        actions = np.where(self.events.compute, "compute", "free").tolist()
        return list(zip(actions, self.events.node.tolist()))

    def stage_peaks(self, size: int) -> np.ndarray:
        """The largest candidate of each of the ``size`` stages (0 where nothing ran)."""
        ev, peaks = self.events, np.zeros(size)
        np.maximum.at(peaks, ev.stage[ev.compute], ev.memory[ev.compute])
        return peaks

    def live_at_peak(self, stage: int | None = None) -> list[int]:
        """Values in memory at the peak (including the output being computed); with
        ``stage``, at that stage's own peak (its first largest candidate)."""
        ev = self.events
        computes = np.flatnonzero(ev.compute & (ev.stage == (self.peak_stage if stage is None
                                                             else stage)))
        if stage is None:
            computes = computes[ev.node[computes] == self.peak_node]
        if computes.size == 0:
            return []
        at = int(computes[np.argmax(ev.memory[computes])]) if stage is not None \
            else int(computes[0])
        nodes, computed = ev.node[at::-1], ev.compute[at::-1]
        _, latest = np.unique(nodes, return_index=True)  # each value's last event up to ``at``
        return sorted(nodes[latest[computed[latest]]].tolist())


def as_matrix(graph: RematGraph, matrix, label: str) -> np.ndarray:
    """``matrix`` as a [T, T] bool array; raises InvalidScheduleError on a bad shape or value."""
    arr = np.asarray(matrix)
    size = graph.size
    if arr.shape != (size, size):
        raise InvalidScheduleError(f"{label} has shape {arr.shape}; the graph needs ({size}, {size})")
    if arr.dtype != bool:
        if not np.isin(arr, (0, 1)).all():
            raise InvalidScheduleError(f"{label} must hold only 0/1 values")
        arr = arr.astype(bool)
    return arr


def check_shape(graph: RematGraph, R: np.ndarray, S: np.ndarray) -> None:
    """The structural rules: R[t,t]=1, nothing computed after t, nothing resident from >= t,
    and a value kept into stage t+1 was resident or computed in stage t."""
    size = graph.size
    if not np.diagonal(R).all():
        t = int(np.flatnonzero(~np.diagonal(R))[0])
        raise InvalidScheduleError(f"stage {t} must compute its own {graph.describe(t)} (R[{t},{t}]=0)")
    if (R & upper(size, 1)).any():
        t, i = map(int, np.argwhere(R & upper(size, 1))[0])
        raise InvalidScheduleError(f"stage {t} computes {graph.describe(i)}, which comes after "
                                   f"node {t}: stage t may compute only nodes <= t")
    if (S & upper(size, 0)).any():
        t, i = map(int, np.argwhere(S & upper(size, 0))[0])
        raise InvalidScheduleError(f"stage {t} starts with {graph.describe(i)} resident, but it "
                                   f"is not computed before stage {i}")
    if size > 1:
        grown = S[1:] & ~(S[:-1] | R[:-1])
        if grown.any():
            t, i = map(int, np.argwhere(grown)[0])
            raise InvalidScheduleError(f"{graph.describe(i)} is resident at the start of stage "
                                       f"{t + 1} but was neither resident nor computed in stage {t}")


def simulate(graph: RematGraph, R, S) -> Simulation:
    """Validate the schedule and replay it under DESIGN.md's memory rule.

    Raises InvalidScheduleError naming the stage, the node and the missing dependency.
    """
    R = as_matrix(graph, R, "R")
    S = as_matrix(graph, S, "S")
    check_shape(graph, R, S)
    keep = np.zeros_like(S)  # kept into the next stage
    keep[:-1] = S[1:]
    start = float(graph.static_mem)
    events = replay(graph, R, S, keep, start)
    peak, at = _peak(events, start)
    cost = compute_cost(graph, R)
    stage, node = (int(events.stage[at]), int(events.node[at])) if at >= 0 else (-1, -1)
    return Simulation(peak, cost, stage, node, events)


def stage_peaks(graph: RematGraph, R: np.ndarray, S: np.ndarray,
                rows: np.ndarray | None = None) -> np.ndarray:
    """The peak of each stage in ``rows`` (all where None; any order), as ``simulate``'s
    ``Simulation.stage_peaks`` gives it, replaying only those stages: stage t starts with
    exactly S[t] alive and keeps S[t + 1], so it can be replayed alone. For local searches
    that change a few stages of a valid schedule at a time; it checks the reads of those
    stages only (an error names a stage by its place in ``rows``), not the structural rules
    (``check_shape``)."""
    rows = np.arange(graph.size) if rows is None else np.asarray(rows, dtype=int)
    return _peaks_of(graph, *_stages(graph, R, S, rows))


def _stages(graph: RematGraph, R: np.ndarray, S: np.ndarray,
            rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stages ``rows`` of (R, S) alone: their rows of R and S and what each keeps."""
    keep = np.zeros((len(rows), graph.size), dtype=bool)
    inside = rows + 1 < graph.size
    keep[inside] = S[rows[inside] + 1]
    return R[rows], S[rows], keep


def _peaks_of(graph: RematGraph, R: np.ndarray, S: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The peak of each stage given alone (``_stages``; rows of any schedules): replayed
    together, each from its own start."""
    events = replay(graph, R, S, keep, 0.0)
    # replay runs the rows on from one another: row k starts where row k - 1 ended, at
    # what it keeps; move each row to its own start, static memory and S[t]
    held, kept = _row_sums(S, graph.mem), _row_sums(keep, graph.mem)
    ran_from = np.concatenate(([0.0], np.cumsum(kept - held)[:-1]))
    shift = graph.static_mem + held - ran_from
    peaks = np.zeros(len(S))
    computes = np.flatnonzero(events.compute)  # in the order of rows
    if computes.size:
        stage = events.stage[computes]
        firsts = np.flatnonzero(np.concatenate(([True], stage[1:] != stage[:-1])))
        ran = stage[firsts]
        peaks[ran] = np.maximum.reduceat(events.memory[computes], firsts) + shift[ran]
    return peaks


def _row_sums(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``matrix @ weights`` for a bool matrix, over its nonzeros only (bool rows made float
    first cost more than the replay itself for a hundred rows of a 1001-node graph); the
    same sums where the weights are whole bytes, in the last bits otherwise."""
    index = np.flatnonzero(matrix)
    size = matrix.shape[1]
    return np.bincount(index // size, weights=weights[index % size], minlength=len(matrix))


def restaged(graph: RematGraph, R: np.ndarray, S: np.ndarray, was: tuple) -> np.ndarray:
    """The stage peaks of (R, S) (``stage_peaks``), where ``was`` is (R, S, stage peaks) of a
    schedule it differs from in a few stages: only the stages whose R, S or next S (what the
    stage keeps) changed are replayed."""
    return restaged_all(graph, [(R, S)], was)[0]


def restaged_all(graph: RematGraph, schedules: list[tuple[np.ndarray, np.ndarray]],
                 was: tuple) -> list[np.ndarray]:
    """``restaged`` of each schedule (R, S), all changed stages replayed at once (a local
    search's moves: one replay, not one per move)."""
    R_was, S_was, peaks = was
    rows, parts = [], []
    for R, S in schedules:
        moved = (S != S_was).any(axis=1)
        changed = moved | (R != R_was).any(axis=1)
        changed[:-1] |= moved[1:]
        rows.append(np.flatnonzero(changed))
        parts.append(_stages(graph, R, S, rows[-1]))
    if not parts:
        return []
    found = _peaks_of(graph, *(np.concatenate(p) for p in zip(*parts)))
    ends = np.cumsum([len(r) for r in rows])
    result = []
    for k, changed in enumerate(rows):
        result.append(peaks.copy())
        result[-1][changed] = found[ends[k] - len(changed):ends[k]]
    return result


def compute_cost(graph: RematGraph, R: np.ndarray) -> float:
    """What running R costs, priced as counts x cost so that checkpoint-all costs exactly
    ``graph.total_cost`` (the price ``simulate`` reports, without the replay)."""
    counts = np.bincount(np.flatnonzero(R) % R.shape[1], minlength=R.shape[1])  # R.sum(0),
    return float((counts * graph.cost).sum())  # 2x faster on bool rows (0.08 ms at T = 679)


def replay(graph: RematGraph, R: np.ndarray, S: np.ndarray, keep: np.ndarray,
           start: float, first: int = 0) -> Events:
    """The memory rule on consecutive stages ``first``, ``first + 1``, ... (rows of R, S and
    ``keep``, what each stage keeps into the next), from ``start`` bytes in use.

    Stage t starts with exactly S[t] alive (each stage frees all it does not keep), so the
    stages are replayed together, in numpy. In each stage: the resident values it neither
    reads nor keeps (or keeps as a copy it computes again) are freed first, in index order;
    then each computation, in index order, allocates its output (a recomputed copy replaces a
    resident one) and right after it frees each input it was the last reader of in the stage
    and that is not kept, then its own output if nothing in the stage reads it and it is not
    kept."""
    size = R.shape[1]
    stage, node = nonzero(R)  # the computations, in the order they run
    order = np.arange(len(stage))
    r_comp, r_dep = reads(graph, node)
    r_stage = stage[r_comp]
    _check_reads(graph, R, S, first, stage, node, r_stage, r_dep, r_comp)
    read = np.zeros(R.shape, dtype=bool)
    read[r_stage, r_dep] = True
    freed_first = unkept_mask(R, S, keep) & ~read
    f_stage, f_node = nonzero(freed_first)
    last = _last_reads(r_stage * size + r_dep)
    dep_free = last & ~keep[r_stage, r_dep]
    self_free = ~read[stage, node] & ~keep[stage, node]
    begins = np.searchsorted(stage, np.arange(R.shape[0]))  # each stage's first computation
    # each event's computation (the stage's first one for the frees before it), then its kind
    slot = np.concatenate([begins[f_stage] * 4, order * 4 + 1, r_comp[dep_free] * 4 + 2,
                           order[self_free] * 4 + 3])
    nodes = np.concatenate([f_node, node, r_dep[dep_free], node[self_free]])
    mem = graph.mem
    grown = np.where(S[stage, node] & ~freed_first[stage, node], 0.0, mem[node])
    delta = np.concatenate([-mem[f_node], grown, -mem[r_dep[dep_free]], -mem[node[self_free]]])
    run = np.argsort(slot, kind="stable")
    nodes, delta, compute = nodes[run], delta[run], slot[run] % 4 == 1
    used = np.cumsum(np.concatenate(([start], delta)))
    memory = used[1:].copy()  # a free: what is in use after it
    memory[compute] = used[:-1][compute] + mem[nodes[compute]] + \
        graph.workspace[nodes[compute]]  # a computation: its candidate
    stages = np.concatenate([f_stage, stage, r_stage[dep_free], stage[self_free]])[run] + first
    for array in (stages, nodes, compute, memory):
        array.flags.writeable = False  # a Simulation is frozen, its events too
    return Events(stages, nodes, compute, memory)


def _peak(events: Events, start: float) -> tuple[float, int]:
    """The peak (at least ``start``) and the index of its event: the first largest candidate,
    or the first computation where none exceeds ``start`` (-1 where nothing ran)."""
    candidates = np.flatnonzero(events.compute)
    if candidates.size == 0:
        return start, -1
    top = int(candidates[np.argmax(events.memory[candidates])])
    if events.memory[top] > start:
        return float(events.memory[top]), top
    return start, int(candidates[0])


def reads(graph: RematGraph, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every read by the computations ``node`` (in the order they run), in that order (by
    computation, then the reader's dependency order): (index into ``node``, value read)."""
    indptr, indices = graph.dep_edges
    counts = indptr[node + 1] - indptr[node]
    comp = np.repeat(np.arange(len(node)), counts)
    offsets = np.arange(len(comp)) - np.repeat(np.cumsum(counts) - counts, counts)
    return comp, indices[np.repeat(indptr[node], counts) + offsets]


def _last_reads(key: np.ndarray) -> np.ndarray:
    """Whether each read is the last of its (stage, value) ``key`` in run order."""
    order = np.argsort(key, kind="stable")
    last = np.ones(len(key), dtype=bool)
    last[order[:-1]] = key[order[:-1]] != key[order[1:]]
    return last


def _check_reads(graph, R, S, first, stage, node, r_stage, r_dep, r_comp) -> None:
    """Every input a computation reads is resident at its stage's start or computed earlier
    in the stage; else InvalidScheduleError for the first read that is not."""
    missing = np.flatnonzero(~(S[r_stage, r_dep] | R[r_stage, r_dep]))
    if missing.size == 0:
        return
    i = missing[0]
    t, k, d = int(r_stage[i]) + first, int(node[r_comp[i]]), int(r_dep[i])
    raise InvalidScheduleError(
        f"stage {t}: {graph.describe(k)} needs {graph.describe(d)}, which is neither resident "
        f"at the start of stage {t} nor computed earlier in it; keep it (S[{t},{d}]=1) or "
        f"recompute it (R[{t},{d}]=1)")


def unkept_mask(R: np.ndarray, S: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The resident values a stage frees at its start unless it reads them: not kept into the
    next stage, or kept as the copy it computes again (rows or whole matrices alike)."""
    return S & (~keep | R)


def nonzero(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a 2-D matrix, row by row: through the flat indices, over 10x faster
    on a 1001 x 1001 bool matrix (0.13 ms against 1.7 ms)."""
    return np.divmod(np.flatnonzero(matrix), matrix.shape[1])


@lru_cache(maxsize=4)
def upper(size: int, k: int) -> np.ndarray:
    """The [size, size] bool mask of the entries on and above the k-th diagonal (read-only,
    cached: 0.04 ms to apply at T = 1001 against 0.7 ms for ``np.triu``; T^2 bytes each): a
    schedule's R must be False on it for k = 1, its S for k = 0."""
    mask = np.triu(np.ones((size, size), dtype=bool), k)
    mask.flags.writeable = False
    return mask
