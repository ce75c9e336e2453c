"""A fused node's internal peak: temporaries made and freed while the node runs.

A remat node's ``mem`` counts only the values read outside it. Its other aten outputs (a
decomposed upsampling's index tensors, BatchNorm's centred input, a scaled attention score)
are made and freed inside the node: the runtime emits the node's fx ops in joint order and
fx frees each value right after its last use. Replaying that order over the storage map
gives, per op, the bytes of such temporaries alive while it runs; their maximum over the
node is held only while the node runs, so it belongs in the node's transient workspace.

Counted per op: every storage the node creates that is not static (parameters, buffers, the
loss: in ``static_mem``), alive from the op that makes it to its last read inside the node;
an output of the node (in ``mem``) from the op that makes it to the node's end. The node's
workspace is that peak less ``mem``, which the simulator already holds for the whole node:
an output is never counted twice, and an early temporary may use the room of a later output.
A tuple op's items live at least as long as the tuple, which fx frees after its last
``getitem``; items no ``getitem`` reads count while the tuple lives. Scratch memory inside
a single aten kernel is not visible here and not counted.
"""
from __future__ import annotations

import operator

import torch
from torch import fx

from remat.capture.storage import StorageMap, tensor_storage_bytes


def internal_peaks(nodes: list[fx.Node], storages: StorageMap, skip: set[str],
                   fresh: set[str], outputs: set[str] = frozenset()) -> tuple[int, int]:
    """``(internal, with_gradients)`` for one remat node.

    ``nodes``: the node's fx nodes in joint order. ``skip``: storages counted elsewhere (the
    node's outputs and every static storage but the fresh gradients). ``fresh``: storages of
    fresh parameter gradients. ``outputs``: the node's output storages (its ``mem``, which
    the simulator counts from the node's start): an op running before an output exists
    has that output's bytes to spare, so the result is the peak over the ops of temporaries
    plus outputs made so far, less all outputs (never below 0). ``internal`` counts the
    temporaries alone (a first step, where each fresh gradient becomes ``p.grad``);
    ``with_gradients`` adds the fresh gradients alive at the same op (every later step,
    where a fresh gradient sits beside ``p.grad`` from its op until it is added in).
    """
    intervals = _intervals(nodes, storages)
    alone = [0] * len(nodes)
    both = [0] * len(nodes)
    for key, (start, end, nbytes) in intervals.items():
        if key in outputs:
            end = len(nodes) - 1  # an output stays for the rest of the node
        elif key in skip and key not in fresh:
            continue
        for i in range(start, end + 1):
            both[i] += nbytes
            if key not in fresh:
                alone[i] += nbytes
    made = sum(intervals[key][2] for key in outputs if key in intervals)
    return (max(max(alone, default=0) - made, 0), max(max(both, default=0) - made, 0))


def _intervals(nodes: list[fx.Node], storages: StorageMap) -> dict[str, tuple[int, int, int]]:
    """Storage (or unread tuple item) made in this node -> (first op, last op, bytes)."""
    position = {n.name: i for i, n in enumerate(nodes)}
    last_use = {n.name: max([i] + [position[u.name] for u in n.users if u.name in position])
                for i, n in enumerate(nodes)}
    intervals: dict[str, tuple[int, int, int]] = {}
    for i, node in enumerate(nodes):
        key = storages.storage.get(node.name)
        if key is None:
            intervals.update(_unread_items(node, i, last_use[node.name]))
            continue
        end = last_use[node.name]
        start = i
        if node.target is operator.getitem and node.args[0].name in position:
            start = position[node.args[0].name]  # made by the tuple op, freed with the tuple
            end = max(end, last_use[node.args[0].name])
        if key in intervals:  # a view of a storage made earlier in the node
            first, last, nbytes = intervals[key]
            intervals[key] = (first, max(last, end), nbytes)
        elif key == node.name:
            intervals[key] = (start, end, storages.nbytes[key])
    return intervals


def _unread_items(node: fx.Node, start: int, end: int) -> dict[str, tuple[int, int, int]]:
    """Tensor items of a tuple output that no ``getitem`` reads, alive while the tuple is."""
    val = node.meta.get("val")
    if node.op != "call_function" or not isinstance(val, (tuple, list)):
        return {}
    read = {u.args[1] for u in node.users if u.target is operator.getitem}
    return {f"{node.name}[{j}]": (start, end, tensor_storage_bytes(item))
            for j, item in enumerate(val)
            if j not in read and isinstance(item, torch.Tensor)}
