"""Synthetic training-step graphs: a forward DAG, a loss, and the mirrored backward pass.

The backward node of forward node k needs the gradient from every user of k (or the loss) and
k's own inputs and output, as the backward of a real layer does. With ``unit=True`` every cost
and size is 1 (the classic checkpointing setting); otherwise costs and sizes vary like a real
network's (backward about twice the forward cost, activation sizes shrinking with depth).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from remat.graph.core import RematGraph

MiB = 1 << 20


def training_graph(forward_deps: Sequence[Sequence[int]], cost: Sequence[float],
                   mem: Sequence[float], names: Sequence[str] | None = None,
                   input_mem: float = 0.0, loss_cost: float = 1.0, loss_mem: float = 1.0,
                   static_mem: float = 0.0, backward_ratio: float = 2.0,
                   grad_mem: float | None = None,
                   activation: Sequence[float] | None = None,
                   backward_reads: Sequence[str] | None = None) -> RematGraph:
    """Mirror a forward DAG into a whole training step (forward, loss, backward).

    ``forward_deps[k]`` lists the forward nodes node k reads (all earlier). The loss reads every
    forward node that nothing else reads. Backward node b_k reads the gradients of k's users,
    k's inputs and k's output; it costs ``backward_ratio`` times k and its output (the gradient
    of k's input) is the size of k's input, or ``input_mem`` for nodes that read only the input
    (``grad_mem``, if given, sets every backward size instead). ``activation[k]`` is the size of
    k's output tensor when ``mem[k]`` also counts what k saves for its backward (default: mem).
    ``backward_reads[k]`` narrows what b_k reads besides the gradients: "inputs" (a matmul or
    convolution without bias), "output" (ReLU, sigmoid) or "both" (the default).
    """
    n = len(forward_deps)
    names = list(names) if names is not None else [f"f{k}" for k in range(n)]
    fwd_users: list[list[int]] = [[] for _ in range(n)]
    for k, ds in enumerate(forward_deps):
        for d in ds:
            fwd_users[d].append(k)
    loss = n
    sinks = [k for k in range(n) if not fwd_users[k]]
    bwd_index = {k: loss + 1 + (n - 1 - k) for k in range(n)}
    all_deps: list[list[int]] = [list(ds) for ds in forward_deps] + [sinks]
    all_cost = list(cost) + [loss_cost]
    all_mem = list(mem) + [loss_mem]
    for k in reversed(range(n)):
        grads = [bwd_index[u] for u in fwd_users[k]] or [loss]
        if not fwd_users[k]:
            grads = [loss]
        reads = "both" if backward_reads is None else backward_reads[k]
        if reads not in ("inputs", "output", "both"):
            raise ValueError(f"backward_reads[{k}] must be 'inputs', 'output' or 'both', "
                             f"got {reads!r}")
        saved = (list(forward_deps[k]) if reads != "output" else []) + \
            ([k] if reads != "inputs" else [])
        all_deps.append(sorted(set(grads + saved)))
        all_cost.append(backward_ratio * cost[k])
        inputs = forward_deps[k]
        act = mem if activation is None else activation
        size = sum(act[d] for d in inputs) if inputs else input_mem
        all_mem.append(size if grad_mem is None else grad_mem)
    all_names = names + ["loss"] + [f"grad_{names[k]}" for k in reversed(range(n))]
    backward = [False] * (n + 1) + [True] * n
    return RematGraph(all_names, all_cost, all_mem, all_deps, backward, static_mem=static_mem)


def linear(n: int, unit: bool = False) -> RematGraph:
    """A chain of ``n`` layers: T = 2n + 1 nodes."""
    _check_size("linear", n, 1)
    deps = [[k - 1] if k else [] for k in range(n)]
    if unit:
        return training_graph(deps, [1] * n, [1] * n, input_mem=1, backward_ratio=1, grad_mem=1)
    rng = np.random.default_rng(n)
    cost = rng.uniform(0.5, 2.0, n).round(3)
    act = [float(_shrinking_size(k, n, rng)) for k in range(n)]
    saved = [a * int(rng.integers(1, 4)) for a in act]  # a layer saves 1-3 tensors of its size
    return training_graph(deps, list(cost), saved, input_mem=act[0], loss_mem=4,
                          static_mem=8 * MiB, activation=act)


def unet(depth: int, unit: bool = False) -> RematGraph:
    """A U-Net: ``depth`` encoder levels, a bottleneck and ``depth`` decoder levels, each
    decoder level reading the encoder output of its level (a long skip connection)."""
    _check_size("unet", depth, 1)
    names = [f"down{i}" for i in range(depth)] + ["bottleneck"]
    names += [f"up{i}" for i in reversed(range(depth))]
    deps: list[list[int]] = [[i - 1] if i else [] for i in range(depth + 1)]
    for level in reversed(range(depth)):
        deps.append([len(deps) - 1, level])
    n = len(deps)
    if unit:
        return training_graph(deps, [1] * n, [1] * n, names, input_mem=1, backward_ratio=1, grad_mem=1)
    level_of = list(range(depth)) + [depth] + list(reversed(range(depth)))
    mem = [float(4 * MiB >> lv) for lv in level_of]  # channels x2, pixels /4 per level
    cost = [1.0 + 0.25 * lv for lv in level_of]
    return training_graph(deps, cost, mem, names, input_mem=mem[0], loss_mem=4,
                          static_mem=16 * MiB)


def random_dag(n: int, seed: int = 0, unit: bool = False) -> RematGraph:
    """A random layered forward DAG of ``n`` nodes (a spine plus random skip edges)."""
    _check_size("random_dag", n, 1)
    rng = np.random.default_rng(seed)
    deps: list[list[int]] = []
    for k in range(n):
        ds = {k - 1} if k else set()
        for _ in range(int(rng.integers(0, 3))):
            if k >= 2 and rng.random() < 0.5:
                ds.add(int(rng.integers(max(0, k - 6), k - 1)))
        deps.append(sorted(ds))
    if unit:
        return training_graph(deps, [1] * n, [1] * n, input_mem=1, backward_ratio=1, grad_mem=1)
    cost = rng.lognormal(0.0, 0.6, n).round(3)
    mem = (rng.integers(1, 9, n) * MiB // 2).astype(float)
    return training_graph(deps, list(cost), list(mem), input_mem=float(mem[0]), loss_mem=4,
                          static_mem=4 * MiB)


def op_chain(n: int, seed: int = 0) -> RematGraph:
    """A chain of ``n`` op-level layers as captured at op granularity: heavy ops (convolution,
    matmul: their backward reads their input) alternate with cheap ones (ReLU: its backward
    reads its output), with a few skip connections into heavy ops. Dropping a cheap op's
    output then means rebuilding it from the heavy op's output, which nothing else keeps."""
    _check_size("op_chain", n, 1)
    rng = np.random.default_rng(seed)
    deps: list[list[int]] = [[k - 1] if k else [] for k in range(n)]
    for k in range(2, n, 2):
        if rng.random() < 0.3:
            deps[k].append(int(rng.integers(0, k - 1)))
    heavy = [k % 2 == 0 for k in range(n)]
    cost = [float(rng.lognormal(0.0, 0.5)) if h else float(rng.uniform(0.005, 0.05))
            for h in heavy]
    mem = [float(rng.integers(1, 9) * MiB // 2) for _ in range(n)]
    reads = ["inputs" if h else "output" for h in heavy]
    return training_graph(deps, cost, mem, input_mem=mem[0], loss_mem=4, static_mem=4 * MiB,
                          backward_reads=reads)


def _shrinking_size(k: int, n: int, rng) -> int:
    """Activation bytes of layer k: larger early, smaller late, with some variety."""
    stage = min(3, 4 * k // max(n, 1))
    return int((4 * MiB >> stage) * rng.choice([1, 1, 2]))


def _check_size(label: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{label}: size must be an integer >= {low}, got {value!r}")
