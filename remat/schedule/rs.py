"""Derive one half of a schedule from the other (Checkmate's two-phase idea).

A heuristic or a rounded LP only decides what to keep (S); ``cheapest_r`` then computes, per
stage, exactly what that S forces: node t, every value S keeps into the next stage that is not
resident yet, and (recursively) every missing input of those. ``s_from_r`` is the dual: given
what each stage computes, keep each value from its last computation to its last read, and no
longer. ``tighten`` alternates the two until neither changes; cost and memory only go down.
"""
from __future__ import annotations

import numpy as np

from remat.errors import InvalidScheduleError
from remat.graph.core import RematGraph
from remat.schedule.simulate import as_matrix


def cheapest_r(graph: RematGraph, S) -> np.ndarray:
    """The least R that makes ``S`` a valid schedule (R[t] never recomputes a resident value)."""
    S = as_matrix(graph, S, "S")
    size = graph.size
    early = np.argwhere(np.triu(S))
    if early.size:
        t, i = map(int, early[0])
        raise InvalidScheduleError(f"S[{t},{i}]=1: stage {t} cannot start with "
                                   f"{graph.describe(i)}, which comes at or after node {t}")
    R = np.zeros((size, size), dtype=bool)
    for t in range(size):
        resident = S[t]
        wanted = [t]
        if t + 1 < size:
            wanted += [int(i) for i in np.flatnonzero(S[t + 1] & ~resident)]
        row = R[t]
        while wanted:
            node = wanted.pop()
            if row[node]:
                continue
            row[node] = True
            wanted.extend(d for d in graph.deps[node] if not resident[d] and not row[d])
    return R


def s_from_r(graph: RematGraph, R) -> np.ndarray:
    """The least S for ``R``: each value stays from its last computation to its last read."""
    R = as_matrix(graph, R, "R")
    size = graph.size
    S = np.zeros((size, size), dtype=bool)
    last_computed = np.full(size, -1)
    for t in range(size):
        computed = np.flatnonzero(R[t])
        in_stage = set(int(k) for k in computed)
        for k in computed:
            for d in graph.deps[int(k)]:
                if d in in_stage and d < k:
                    continue
                if last_computed[d] < 0:
                    raise InvalidScheduleError(
                        f"stage {t}: {graph.describe(int(k))} reads {graph.describe(d)} before "
                        f"any stage computes it")
                S[last_computed[d] + 1:t + 1, d] = True
        last_computed[computed] = t
    return S


def tighten(graph: RematGraph, S) -> tuple[np.ndarray, np.ndarray]:
    """Alternate ``cheapest_r`` and ``s_from_r`` to a fixed point; returns (R, S)."""
    R = cheapest_r(graph, S)
    while True:
        S = s_from_r(graph, R)
        R_next = cheapest_r(graph, S)
        if np.array_equal(R_next, R):
            return R, S
        R = R_next


def checkpoint_all(graph: RematGraph) -> tuple[np.ndarray, np.ndarray]:
    """The plain training step: every node once, every value kept until its last read."""
    R = np.eye(graph.size, dtype=bool)
    return R, s_from_r(graph, R)


def from_checkpoints(graph: RematGraph, checkpoints) -> tuple[np.ndarray, np.ndarray]:
    """The segment schedule of Chen et al. for a set of forward checkpoints.

    Forward nodes are split into segments, each closed by a checkpoint (in index order). The
    forward pass keeps checkpoints and drops other values after their last forward read; the
    last segment stays resident for the backward pass. When the backward pass first reads a
    dropped value of a segment, that whole segment is recomputed in that stage and kept until
    its last read. ``tighten`` then removes everything nobody reads.
    """
    keep = set(int(c) for c in checkpoints)
    forward = graph.forward_nodes
    segment = np.full(graph.size, -1)
    current = 0
    for i in forward:
        segment[i] = current
        current += i in keep
    last_segment = segment[forward[-1]] if forward else -1
    opened = _segment_open_stages(graph, segment, keep)
    S = np.zeros((graph.size, graph.size), dtype=bool)
    for i in range(graph.size):
        if graph.is_backward[i] or i in keep or segment[i] == last_segment:
            S[i + 1:, i] = True
            continue
        forward_reads = [u for u in graph.users[i] if not graph.is_backward[u]]
        if forward_reads:
            S[i + 1:max(forward_reads) + 1, i] = True
        S[opened.get(int(segment[i]), graph.size) + 1:, i] = True
    return tighten(graph, S)


def _segment_open_stages(graph: RematGraph, segment: np.ndarray, keep: set[int]) -> dict[int, int]:
    """First backward stage that reads a dropped value of each segment."""
    opened: dict[int, int] = {}
    for b in graph.backward_nodes:
        for d in graph.deps[b]:
            if segment[d] >= 0 and d not in keep:
                opened.setdefault(int(segment[d]), b)
    return opened
