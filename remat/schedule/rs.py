"""Derive one half of a schedule from the other (Checkmate's two-phase idea).

A heuristic or a rounded LP only decides what to keep (S); ``cheapest_r`` then computes, per
stage, exactly what that S forces: node t, every value S keeps into the next stage that is not
resident yet, and (recursively) every missing input of those. ``s_from_r`` is the dual: given
what each stage computes, keep each value from its last computation to its last read, and no
longer. ``tighten`` alternates the two until neither changes; cost and memory only go down.
Local searches tighten many schedules that each differ from a tightened one in a few rows:
from that one, in C, only the rows and columns a step can change are derived again: the same
fixed point, 1.6-2.8x faster on a peak descent's moves (bench/results/fast_notes.md, session
41; ``_tighten_from``).
"""
from __future__ import annotations

import numpy as np

from remat.errors import InvalidScheduleError
from remat.graph.core import RematGraph
from remat.schedule.simulate import as_matrix, nonzero, reads, upper

try:  # the same two functions in C (setup.py), 5-11x faster at 266-679 nodes; numpy where
    # not built (bench/results/fast_notes.md, session 36); and tighten from a fixed point
    from remat.schedule import _rs_c
except ImportError:
    _rs_c = None
COMPILED = _rs_c is not None
"""Whether ``cheapest_r``, ``s_from_r`` and ``tighten`` from a fixed point run in C."""


def cheapest_r(graph: RematGraph, S) -> np.ndarray:
    """The least R that makes ``S`` a valid schedule (R[t] never recomputes a resident value)."""
    S = as_matrix(graph, S, "S")
    size = graph.size
    if (S & upper(size, 0)).any():
        t, i = map(int, np.argwhere(S & upper(size, 0))[0])
        raise InvalidScheduleError(f"S[{t},{i}]=1: stage {t} cannot start with "
                                   f"{graph.describe(i)}, which comes at or after node {t}")
    if COMPILED:
        R = np.zeros((size, size), dtype=bool)
        _rs_c.cheapest_r(np.ascontiguousarray(S), R, *graph.dep_edges)
        return R
    return _cheapest_r(graph, S)


def _cheapest_r(graph: RematGraph, S: np.ndarray) -> np.ndarray:
    """``cheapest_r`` in numpy, for a valid ``S``."""
    size = graph.size
    R = np.zeros_like(S)
    R[:-1] = S[1:] & ~S[:-1]  # kept into stage t+1 but not resident at stage t
    np.fill_diagonal(R, True)
    # their missing inputs, a layer of the closure at a time, every stage at once
    stage, node = nonzero(R)
    while stage.size:
        comp, dep = reads(graph, node)
        stage = stage[comp]
        missing = ~(S[stage, dep] | R[stage, dep])
        stage, node = np.divmod(np.unique(stage[missing] * size + dep[missing]), size)
        R[stage, node] = True
    return R


def s_from_r(graph: RematGraph, R) -> np.ndarray:
    """The least S for ``R``: each value stays from its last computation to its last read."""
    R = as_matrix(graph, R, "R")
    if not COMPILED:
        return _s_from_r(graph, R)
    S = np.zeros(R.shape, dtype=bool)
    early = _rs_c.s_from_r(np.ascontiguousarray(R), S, *graph.dep_edges)
    if early is not None:
        raise _read_too_early(graph, *early)
    return S


def _read_too_early(graph: RematGraph, stage: int, reader: int,
                    dep: int) -> InvalidScheduleError:
    """The error for stage ``stage``'s ``reader`` reading ``dep`` before any computation."""
    return InvalidScheduleError(f"stage {stage}: {graph.describe(reader)} reads "
                                f"{graph.describe(dep)} before any stage computes it")


def _s_from_r(graph: RematGraph, R: np.ndarray) -> np.ndarray:
    """``s_from_r`` in numpy."""
    size = graph.size
    c_stage, c_node = nonzero(R)
    comp, dep = reads(graph, c_node)
    stage, reader = c_stage[comp], c_node[comp]
    outside = ~R[stage, dep]  # not read from a copy computed earlier in the same stage
    stage, reader, dep = stage[outside], reader[outside], dep[outside]
    first = np.full(size, size)
    np.minimum.at(first, c_node, c_stage)
    early = np.flatnonzero(first[dep] >= stage)
    if early.size:
        i = early[0]
        raise _read_too_early(graph, int(stage[i]), int(reader[i]), int(dep[i]))
    # each value's events by stage: its computations and the stages that read it; S[t, d]
    # when the next event of d from stage t on is a read, so from the event before each read
    # (there is one: its computation at least) up to the read
    events = np.concatenate([c_node * size + c_stage, np.unique(dep * size + stage)])
    is_read = np.repeat([False, True], [len(c_stage), len(events) - len(c_stage)])
    order = np.argsort(events, kind="stable")
    events, is_read = events[order], is_read[order]
    at = np.flatnonzero(is_read)
    value, last = np.divmod(events[at], size)
    before = events[at - 1] % size
    lengths = last - before
    rows = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    S = np.zeros((size, size), dtype=bool)
    S[np.repeat(before + 1, lengths) + rows, np.repeat(value, lengths)] = True
    return S


def tighten(graph: RematGraph, S, base: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Alternate ``cheapest_r`` and ``s_from_r`` to a fixed point; returns (R, S).

    ``base``: (R, S) that ``tighten`` returned, on this graph, for a schedule ``S`` differs
    from in a few rows (a local search's move); not checked. In C the same fixed point is
    then reached deriving again only what can change (``_tighten_from``)."""
    if base is not None and COMPILED:
        return _tighten_from(graph, as_matrix(graph, S, "S"), base)
    R = cheapest_r(graph, S)
    while True:
        S = s_from_r(graph, R)
        R_next = cheapest_r(graph, S)
        if np.array_equal(R_next, R):
            return R, S
        R = R_next


def _tighten_from(graph: RematGraph, S: np.ndarray,
                  base: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``tighten``'s loop from ``base`` = (R, S), a fixed point, in C: row t of
    ``cheapest_r`` depends only on rows t and t + 1 of S, and column v of ``s_from_r`` only
    on the columns of R of v and its users, so each step derives again only what the step
    before changed. Where S breaks a rule, ``tighten`` itself says which."""
    R, S_out = np.array(base[0], dtype=bool), np.array(base[1], dtype=bool)
    if _rs_c.tighten_from(np.ascontiguousarray(S), R, S_out, *graph.dep_edges,
                          *graph.user_edges):
        return R, S_out
    return tighten(graph, S)


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
