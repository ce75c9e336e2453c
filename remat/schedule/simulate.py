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
    missing = np.flatnonzero(~np.diagonal(R))
    if missing.size:
        t = int(missing[0])
        raise InvalidScheduleError(f"stage {t} must compute its own {graph.describe(t)} (R[{t},{t}]=0)")
    upper = np.argwhere(np.triu(R, 1))
    if upper.size:
        t, i = map(int, upper[0])
        raise InvalidScheduleError(f"stage {t} computes {graph.describe(i)}, which comes after "
                                   f"node {t}: stage t may compute only nodes <= t")
    early = np.argwhere(np.triu(S))
    if early.size:
        t, i = map(int, early[0])
        raise InvalidScheduleError(f"stage {t} starts with {graph.describe(i)} resident, but it "
                                   f"is not computed before stage {i}")
    if size > 1:
        grown = np.argwhere(S[1:] & ~(S[:-1] | R[:-1]))
        if grown.size:
            t, i = map(int, grown[0])
            raise InvalidScheduleError(f"{graph.describe(i)} is resident at the start of stage "
                                       f"{t + 1} but was neither resident nor computed in stage {t}")


def simulate(graph: RematGraph, R, S) -> Simulation:
    """Validate the schedule and replay it under DESIGN.md's memory rule.

    Raises InvalidScheduleError naming the stage, the node and the missing dependency.
    """
    R = as_matrix(graph, R, "R")
    S = as_matrix(graph, S, "S")
    check_shape(graph, R, S)
    state = _Replay(graph)
    for t in range(graph.size):
        keep = S[t + 1] if t + 1 < graph.size else np.zeros(graph.size, dtype=bool)
        state.run_stage(t, np.flatnonzero(R[t]), np.flatnonzero(S[t]), keep)
    # priced as counts x cost so that checkpoint-all costs exactly graph.total_cost
    cost = float((R.sum(axis=0) * graph.cost).sum())
    return Simulation(state.peak, cost, tuple(state.events), state.peak_stage, state.peak_node)


class _Replay:
    """Mutable replay state, one instance per simulate() call."""

    def __init__(self, graph: RematGraph):
        self.graph = graph
        self.mem = graph.mem
        self.workspace = graph.workspace
        self.alive = np.zeros(graph.size, dtype=bool)
        self.used = float(graph.static_mem)
        self.peak = float(graph.static_mem)
        self.peak_stage = self.peak_node = -1
        self.events: list[Event] = []

    def run_stage(self, t: int, computed: np.ndarray, resident: np.ndarray, keep: np.ndarray) -> None:
        graph = self.graph
        reads = self._count_reads(t, computed, resident)
        recomputed = set(int(k) for k in computed)
        for i in resident:  # resident values this stage neither reads nor keeps go right away
            i = int(i)
            if reads.get(i, 0) == 0 and (not keep[i] or i in recomputed):
                self._free(t, i)
        for k in computed:
            k = int(k)
            self._compute(t, k)
            for v in graph.deps[k] + (k,):
                if v != k:
                    reads[v] -= 1
                if self.alive[v] and reads.get(v, 0) == 0 and not keep[v]:
                    self._free(t, v)

    def _count_reads(self, t: int, computed: np.ndarray, resident: np.ndarray) -> dict[int, int]:
        graph = self.graph
        available = set(int(i) for i in resident)
        reads: dict[int, int] = {}
        for k in computed:
            k = int(k)
            for d in graph.deps[k]:
                if d not in available:
                    raise InvalidScheduleError(
                        f"stage {t}: {graph.describe(k)} needs {graph.describe(d)}, which is "
                        f"neither resident at the start of stage {t} nor computed earlier in it; "
                        f"keep it (S[{t},{d}]=1) or recompute it (R[{t},{d}]=1)")
                reads[d] = reads.get(d, 0) + 1
            available.add(k)
        return reads

    def _compute(self, t: int, k: int) -> None:
        allocated = self.used + self.mem[k]
        candidate = allocated + self.workspace[k]  # the workspace lives only while k runs
        if candidate > self.peak or self.peak_node < 0:
            self.peak, self.peak_stage, self.peak_node = max(candidate, self.peak), t, k
        self.events.append(Event(t, "compute", k, candidate))
        # a recomputed copy replaces a still-resident one
        self.used = allocated - (self.mem[k] if self.alive[k] else 0.0)
        self.alive[k] = True

    def _free(self, t: int, v: int) -> None:
        self.alive[v] = False
        self.used -= self.mem[v]
        self.events.append(Event(t, "free", v, self.used))
