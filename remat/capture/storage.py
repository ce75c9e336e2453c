"""Which storage each joint value lives in, and how many bytes that storage holds.

Saved-for-backward values are often views or ``detach`` of another value. Memory is held by
storages, not by fx nodes, so every size and every ownership question in remat goes through
the map built here: a view op's output shares its base's storage, a fresh op's output (or
each item of a tuple output) creates a storage named after the node that made it.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from remat.errors import UnsupportedModelError

# ops that alias their input without saying so in their schema
_HIDDEN_ALIASES = {"aten::_unsafe_view", "aten::alias"}


@dataclass(frozen=True)
class StorageMap:
    """``storage[node_name]``: the creating node's name of the storage a value lives in
    (absent for non-tensor values); ``nbytes[storage]``: its size."""

    storage: dict[str, str]
    nbytes: dict[str, int]

    def bytes_of(self, names) -> int:
        """Bytes of the distinct storages behind these nodes (each storage counted once)."""
        seen = {self.storage[n] for n in names if n in self.storage}
        return sum(self.nbytes[s] for s in seen)


def build_storage_map(gm: fx.GraphModule) -> StorageMap:
    storage: dict[str, str] = {}
    nbytes: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function"):
            continue
        val = node.meta.get("val")
        if node.op == "call_function":
            base = _alias_base(node)
            if base is not None:
                if base.name in storage:  # also a list of views (split, unbind)
                    storage[node.name] = storage[base.name]
                continue
        if isinstance(val, torch.Tensor):
            storage[node.name] = node.name
            nbytes[node.name] = tensor_storage_bytes(val)
    return StorageMap(storage, nbytes)


def tensor_storage_bytes(val: torch.Tensor) -> int:
    """Bytes of the storage a fresh tensor of this size/stride/offset needs."""
    if val.numel() == 0:
        return 0
    extent = 1 + int(val.storage_offset()) + sum((int(s) - 1) * abs(int(st))
                                                 for s, st in zip(val.shape, val.stride()))
    return extent * val.element_size()


def _alias_base(node: fx.Node) -> fx.Node | None:
    """The input node whose storage ``node``'s output shares, or None for a fresh output."""
    target = node.target
    if target is operator.getitem:
        parent = node.args[0]
        return _alias_base(parent) if isinstance(parent, fx.Node) and _is_view_op(parent) else None
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if _is_write_op(target):
        raise UnsupportedModelError(f"capture cannot handle op {target} (node {node.name!r}): it "
                                    "writes into its input after functionalization; use the "
                                    "out-of-place form of the op")
    if not _is_view_op(node):
        return None
    for arg in node.args:
        if isinstance(arg, fx.Node):
            return arg
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], fx.Node):
            return arg[0]
    return None


def _is_view_op(node: fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.name in _HIDDEN_ALIASES:
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _is_write_op(target) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments)


def split_static_views(gm: fx.GraphModule) -> None:
    """Give every reader its own copy of each view of a placeholder (``t(weight)``).

    A view of a parameter costs no memory, but a shared one would tie its readers together:
    the forward node holding ``t(weight)`` would look needed until the backward reads it, and
    the memory model would keep that node's real outputs alive as long. With one copy per
    reader, each view joins its reader's node. Walks the graph backwards so that view chains
    (``t(t(weight))``) split all the way to the placeholder.
    """
    rooted = _placeholder_views(gm)
    graph = gm.graph
    for node in reversed(list(graph.nodes)):
        if node.name not in rooted or len(node.users) <= 1:
            continue
        for user in list(node.users)[1:]:
            with graph.inserting_before(user):
                copy = graph.call_function(node.target, node.args, node.kwargs)
            copy.meta = dict(node.meta)
            user.replace_input_with(node, copy)
            rooted.add(copy.name)
    graph.lint()
    gm.recompile()


def _placeholder_views(gm: fx.GraphModule) -> set[str]:
    """Names of the view ops whose storage is a placeholder's."""
    rooted: set[str] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            rooted.add(node.name)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            base = _alias_base(node)
            if base is not None and base.name in rooted:
                rooted.add(node.name)
    return rooted - {n.name for n in gm.graph.nodes if n.op == "placeholder"}
