"""The one simulator: applies DESIGN.md's memory rule to an R/S schedule.

Solvers, tests, benchmarks and the runtime all use it, so there is exactly one memory
accounting in remat. It also produces the ordered plan of compute/free steps the runtime runs.
"""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Simulation:
    """What the simulator found. Unpacks as ``peak_memory, compute_cost, timeline``."""

    peak_memory: float
    compute_cost: float
    timeline: tuple[Event, ...]
    peak_stage: int
    peak_node: int

    def __iter__(self) -> Iterator:
        return iter((self.peak_memory, self.compute_cost, self.timeline))

    @property
    def plan(self) -> list[tuple[str, int]]:
        """The ordered steps ``[("compute", i) | ("free", i), ...]``."""
        return [(e.action, e.node) for e in self.timeline]

    def stage_peaks(self, size: int) -> np.ndarray:
        """The largest candidate of each of the ``size`` stages (0 where nothing ran)."""
        peaks = np.zeros(size)
        for event in self.timeline:
            if event.action == "compute":
                peaks[event.stage] = max(peaks[event.stage], event.memory)
        return peaks

    def live_at_peak(self) -> list[int]:
        """Values in memory at the peak (including the output being computed)."""
        live: set[int] = set()
        for event in self.timeline:
            if event.action == "compute":
                live.add(event.node)
            else:
                live.discard(event.node)
            if event.stage == self.peak_stage and event.node == self.peak_node \
                    and event.action == "compute":
                return sorted(live)
        return sorted(live)


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
    if np.triu(R, 1).any():
        t, i = map(int, np.argwhere(np.triu(R, 1))[0])
        raise InvalidScheduleError(f"stage {t} computes {graph.describe(i)}, which comes after "
                                   f"node {t}: stage t may compute only nodes <= t")
    if np.triu(S).any():
        t, i = map(int, np.argwhere(np.triu(S))[0])
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
    unkept = row_lists(unkept_mask(R, S, keep))
    state = _Replay(graph)
    for t, computed in enumerate(row_lists(R)):
        state.run_stage(t, computed, unkept[t], S[t], keep[t])
    # priced as counts x cost so that checkpoint-all costs exactly graph.total_cost
    cost = float((R.sum(axis=0) * graph.cost).sum())
    return Simulation(state.peak, cost, tuple(state.events), state.peak_stage, state.peak_node)


def unkept_mask(R: np.ndarray, S: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The resident values a stage frees at its start unless it reads them: not kept into the
    next stage, or kept as the copy it computes again (rows or whole matrices alike)."""
    return S & (~keep | R)


def row_lists(matrix: np.ndarray) -> list[list[int]]:
    """The column indices of each row's nonzeros, increasing (one pass over the matrix)."""
    rows, cols = np.nonzero(matrix)
    ends = np.searchsorted(rows, np.arange(matrix.shape[0] + 1)).tolist()
    cols = cols.tolist()
    return [cols[ends[t]:ends[t + 1]] for t in range(matrix.shape[0])]


class _Replay:
    """Mutable replay state, one instance per simulate() call."""

    def __init__(self, graph: RematGraph):
        self.graph = graph
        self.mem = graph.mem.tolist()
        self.workspace = graph.workspace.tolist()
        self.alive: set[int] = set()
        self.used = float(graph.static_mem)
        self.peak = float(graph.static_mem)
        self.peak_stage = self.peak_node = -1
        self.events: list[Event] = []

    def run_stage(self, t: int, computed: list[int], unkept: list[int], resident: np.ndarray,
                  keep: np.ndarray) -> None:
        """Stage t: ``computed`` in order; ``unkept``: the resident values it frees as soon as
        nothing in the stage reads them."""
        deps = self.graph.deps
        reads = self._count_reads(t, computed, resident)
        for i in unkept:  # resident values this stage neither reads nor keeps go right away
            if reads.get(i, 0) == 0:
                self._free(t, i)
        for k in computed:
            self._compute(t, k)
            for v in deps[k]:
                reads[v] -= 1
                if reads[v] == 0 and not keep[v] and v in self.alive:
                    self._free(t, v)
            if reads.get(k, 0) == 0 and not keep[k]:
                self._free(t, k)

    def _count_reads(self, t: int, computed: list[int], resident: np.ndarray) -> dict[int, int]:
        deps, done = self.graph.deps, set()
        reads: dict[int, int] = {}
        for k in computed:
            for d in deps[k]:
                if d not in done and not resident[d]:
                    graph = self.graph
                    raise InvalidScheduleError(
                        f"stage {t}: {graph.describe(k)} needs {graph.describe(d)}, which is "
                        f"neither resident at the start of stage {t} nor computed earlier in it; "
                        f"keep it (S[{t},{d}]=1) or recompute it (R[{t},{d}]=1)")
                reads[d] = reads.get(d, 0) + 1
            done.add(k)
        return reads

    def _compute(self, t: int, k: int) -> None:
        allocated = self.used + self.mem[k]
        candidate = allocated + self.workspace[k]  # the workspace lives only while k runs
        if candidate > self.peak or self.peak_node < 0:
            self.peak, self.peak_stage, self.peak_node = max(candidate, self.peak), t, k
        self.events.append(Event(t, "compute", k, candidate))
        # a recomputed copy replaces a still-resident one
        if k in self.alive:
            self.used = allocated - self.mem[k]
        else:
            self.used = allocated
            self.alive.add(k)

    def _free(self, t: int, v: int) -> None:
        self.alive.discard(v)
        self.used -= self.mem[v]
        self.events.append(Event(t, "free", v, self.used))
