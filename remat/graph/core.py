"""``RematGraph``: the frozen, integer-indexed DAG every solver works on.

Node i has a cost, a memory (bytes of the output it keeps between nodes), dependencies that
all come before it, a forward/backward flag and a name. ``static_mem`` is what stays allocated
for the whole step whatever the schedule (parameters, gradients, buffers, inputs). A node may
also have a ``workspace``: transient bytes held only while it runs (DESIGN.md's "transient
workspace of an op", added to its peak candidate and gone right after it).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Sequence

import numpy as np

from remat.errors import InvalidGraphError

GRAPH_FORMAT = "remat-graph/1"
_NODE_KEYS = ("name", "cost", "mem", "deps", "backward")


@dataclass(frozen=True, eq=False)
class RematGraph:
    """A training step as a DAG of remat nodes, validated when built.

    Parameters
    ----------
    names, cost, mem, deps, is_backward
        One entry per node, nodes in topological order (every dependency earlier).
    static_mem
        Bytes allocated for the whole step whatever the schedule.
    node_meta
        Optional extra per-node keys kept in the JSON file (op names, module paths, ...).
    meta
        Optional graph-level keys (units, model name, ...).
    workspace
        Optional transient bytes per node, held only while the node runs (default all 0):
        the candidate for computing node k is ``memory in use + mem[k] + workspace[k]``, and
        none of it stays after k. Saved in the JSON file only when some node has one.
    """

    names: tuple[str, ...]
    cost: np.ndarray
    mem: np.ndarray
    deps: tuple[tuple[int, ...], ...]
    is_backward: np.ndarray
    static_mem: float = 0.0
    node_meta: tuple[dict, ...] = field(default=(), repr=False)
    meta: dict = field(default_factory=dict, repr=False)
    workspace: np.ndarray = field(default=None, repr=False)

    def __init__(self, names: Sequence[str], cost: Iterable[float], mem: Iterable[float],
                 deps: Sequence[Iterable[int]], is_backward: Iterable[bool], static_mem: float = 0,
                 node_meta: Sequence[dict] | None = None, meta: dict | None = None, *,
                 workspace: Iterable[float] | None = None):
        fields = _validated(names, cost, mem, deps, is_backward, static_mem, node_meta)
        size = len(fields["names"])
        fields["workspace"] = _vector("workspace", [0.0] * size if workspace is None else workspace,
                                      size, fields["names"])
        for key, value in fields.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "meta", dict(meta or {}))

    # ----- basic views -------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of nodes T."""
        return len(self.names)

    def __len__(self) -> int:
        return self.size

    @cached_property
    def users(self) -> tuple[tuple[int, ...], ...]:
        """``users[i]``: the nodes that depend on i, increasing."""
        out: list[list[int]] = [[] for _ in range(self.size)]
        for node, node_deps in enumerate(self.deps):
            for dep in node_deps:
                out[dep].append(node)
        return tuple(tuple(u) for u in out)

    @cached_property
    def dep_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The dependencies as arrays (CSR): node k reads ``indices[indptr[k]:indptr[k+1]]``."""
        return _csr(self.deps)

    @cached_property
    def user_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The users as arrays (CSR, as ``dep_edges``): node k is read by
        ``indices[indptr[k]:indptr[k+1]]``, increasing."""
        return _csr(self.users)

    def predecessors(self, node: int) -> tuple[int, ...]:
        return self.deps[node]

    def successors(self, node: int) -> tuple[int, ...]:
        return self.users[node]

    @cached_property
    def forward_nodes(self) -> tuple[int, ...]:
        return tuple(int(i) for i in np.flatnonzero(~self.is_backward))

    @cached_property
    def backward_nodes(self) -> tuple[int, ...]:
        return tuple(int(i) for i in np.flatnonzero(self.is_backward))

    @cached_property
    def loss_node(self) -> int | None:
        """The last forward node (the loss in a training step), or None without forward nodes."""
        forward = self.forward_nodes
        return forward[-1] if forward else None

    @cached_property
    def has_workspace(self) -> bool:
        """True when some node holds transient workspace while it runs."""
        return bool(self.workspace.any())

    @cached_property
    def total_cost(self) -> float:
        return float(self.cost.sum())

    @cached_property
    def index(self) -> dict[str, int]:
        """Node index by name."""
        return {name: i for i, name in enumerate(self.names)}

    @cached_property
    def is_chain(self) -> bool:
        """True for a linear network: forward nodes form a chain, backward mirrors it."""
        forward = self.forward_nodes
        if not forward or list(forward) != list(range(len(forward))):
            return False
        return all(self.deps[i] == ((i - 1,) if i else ()) for i in forward)

    @cached_property
    def forward_articulation_points(self) -> tuple[int, ...]:
        """Forward nodes whose removal disconnects the forward graph (undirected view).

        A checkpoint at such a node splits the forward pass into independent segments: the
        classic choice of checkpoint candidates for non-linear networks (Checkmate's AP variants).
        """
        return _articulation_points(self.forward_nodes, self.deps)

    def with_workspace(self, workspace: Iterable[float]) -> "RematGraph":
        """This graph with another per-node transient workspace (everything else kept)."""
        return RematGraph(self.names, self.cost, self.mem, self.deps, self.is_backward,
                          static_mem=self.static_mem, node_meta=self.node_meta, meta=self.meta,
                          workspace=workspace)

    def describe(self, node: int) -> str:
        """``node 3 'conv2'`` for error messages."""
        return f"node {node} {self.names[node]!r}"

    # ----- JSON --------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike | None = None, indent: int | None = None) -> str:
        """The ``remat-graph/1`` JSON text; also written to ``path`` if given."""
        nodes = []
        for i in range(self.size):
            node = dict(self.node_meta[i]) if self.node_meta else {}
            node.update(name=self.names[i], cost=_number(self.cost[i]), mem=_number(self.mem[i]),
                        deps=list(self.deps[i]), backward=bool(self.is_backward[i]))
            if self.has_workspace:
                node["workspace"] = _number(self.workspace[i])
            nodes.append(node)
        doc = {"format": GRAPH_FORMAT, "static_mem": _number(self.static_mem),
               "meta": self.meta, "nodes": nodes}
        text = json.dumps(doc, indent=indent)
        if path is not None:
            _write_text(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | os.PathLike) -> "RematGraph":
        """Load a ``remat-graph/1`` document (JSON text or a file path). Never executes code."""
        doc = _load_json(text_or_path, GRAPH_FORMAT, InvalidGraphError)
        nodes = doc.get("nodes")
        if not isinstance(nodes, list):
            raise InvalidGraphError("graph JSON: 'nodes' must be a list of node objects")
        for i, node in enumerate(nodes):
            missing = [k for k in _NODE_KEYS if not isinstance(node, dict) or k not in node]
            if missing:
                raise InvalidGraphError(f"graph JSON: node {i} lacks {', '.join(missing)}; each node "
                                        f"needs {', '.join(_NODE_KEYS)}")
        own = _NODE_KEYS + ("workspace",)
        extra = [{k: v for k, v in n.items() if k not in own} for n in nodes]
        return cls([n["name"] for n in nodes], [n["cost"] for n in nodes],
                   [n["mem"] for n in nodes], [n["deps"] for n in nodes],
                   [n["backward"] for n in nodes], static_mem=doc.get("static_mem", 0),
                   node_meta=extra, meta=doc.get("meta") or {},
                   workspace=[n.get("workspace", 0) for n in nodes])


# ----- validation ----------------------------------------------------------------------------
def _validated(names, cost, mem, deps, is_backward, static_mem, node_meta) -> dict[str, Any]:
    names = tuple(names)
    size = len(names)
    if size == 0:
        raise InvalidGraphError("a graph needs at least one node")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise InvalidGraphError(f"node {i}: name must be a non-empty string, got {name!r}")
    if len(set(names)) != size:
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidGraphError(f"node name {dup!r} is used twice: names must be unique")
    cost_arr = _vector("cost", cost, size, names)
    mem_arr = _vector("mem", mem, size, names)
    flags = _flags(is_backward, size)
    dep_tuples = _dependencies(deps, size, names)
    static = _scalar("static_mem", static_mem)
    meta = tuple(dict(m) for m in node_meta) if node_meta else ()
    if meta and len(meta) != size:
        raise InvalidGraphError(f"node_meta has {len(meta)} entries for {size} nodes")
    return dict(names=names, cost=cost_arr, mem=mem_arr, deps=dep_tuples, is_backward=flags,
                static_mem=static, node_meta=meta)


def _vector(label: str, values, size: int, names) -> np.ndarray:
    values = list(values)
    if len(values) != size:
        raise InvalidGraphError(f"{label} has {len(values)} entries for {size} nodes")
    out = np.empty(size, dtype=np.float64)
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidGraphError(f"node {i} {names[i]!r}: {label} must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise InvalidGraphError(f"node {i} {names[i]!r}: {label} must be finite and >= 0, "
                                    f"got {value!r}")
        out[i] = value
    out.setflags(write=False)
    return out


def _scalar(label: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidGraphError(f"{label} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidGraphError(f"{label} must be finite and >= 0, got {value!r}")
    return float(value)


def _flags(values, size: int) -> np.ndarray:
    values = list(values)
    if len(values) != size:
        raise InvalidGraphError(f"is_backward has {len(values)} entries for {size} nodes")
    for i, value in enumerate(values):
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidGraphError(f"node {i}: backward flag must be true or false, got {value!r}")
    out = np.array(values, dtype=bool)
    out.setflags(write=False)
    return out


def _dependencies(deps, size: int, names) -> tuple[tuple[int, ...], ...]:
    deps = list(deps)
    if len(deps) != size:
        raise InvalidGraphError(f"deps has {len(deps)} entries for {size} nodes")
    out = []
    for i, node_deps in enumerate(deps):
        if isinstance(node_deps, (str, bytes)) or not hasattr(node_deps, "__iter__"):
            raise InvalidGraphError(f"node {i} {names[i]!r}: deps must be a list of node indices")
        clean: list[int] = []
        for dep in node_deps:
            if isinstance(dep, bool) or not isinstance(dep, (int, np.integer)):
                raise InvalidGraphError(f"node {i} {names[i]!r}: dependency {dep!r} is not an index")
            if not 0 <= dep < size:
                raise InvalidGraphError(f"node {i} {names[i]!r}: dependency {dep} is out of range "
                                        f"0..{size - 1}")
            if int(dep) not in clean:
                clean.append(int(dep))
        out.append(tuple(sorted(clean)))
    _check_order(out, names)
    return tuple(out)


def _check_order(deps: list[tuple[int, ...]], names) -> None:
    for i, node_deps in enumerate(deps):
        late = [d for d in node_deps if d >= i]
        if not late:
            continue
        cycle = _find_cycle(deps)
        if cycle:
            path = " -> ".join(f"{c} {names[c]!r}" for c in cycle)
            raise InvalidGraphError(f"the dependencies form a cycle: {path}; a training step "
                                    "graph must be acyclic")
        raise InvalidGraphError(f"node {i} {names[i]!r} depends on node {late[0]} "
                                f"{names[late[0]]!r}, which comes later: number the nodes in a "
                                "topological order (every dependency before its user)")


def _find_cycle(deps: list[tuple[int, ...]]) -> list[int] | None:
    """A dependency cycle as a node list (first node repeated at the end), or None."""
    state = [0] * len(deps)  # 0 new, 1 on stack, 2 done
    for root in range(len(deps)):
        if state[root]:
            continue
        stack = [(root, iter(deps[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:
                start = path.index(nxt)
                return path[start:] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))
                path.append(nxt)
    return None


def _articulation_points(nodes: Sequence[int], deps) -> tuple[int, ...]:
    """Articulation points of the undirected graph on ``nodes`` (iterative Tarjan)."""
    node_set = set(nodes)
    adjacency: dict[int, set[int]] = {n: set() for n in nodes}
    for n in nodes:
        for d in deps[n]:
            if d in node_set:
                adjacency[n].add(d)
                adjacency[d].add(n)
    disc: dict[int, int] = {}
    low: dict[int, int] = {}
    points: set[int] = set()
    for root in nodes:
        if root in disc:
            continue
        _tarjan_component(root, adjacency, disc, low, points)
    return tuple(sorted(points))


def _tarjan_component(root, adjacency, disc, low, points) -> None:
    disc[root] = low[root] = len(disc)
    root_children = 0
    stack = [(root, None, iter(sorted(adjacency[root])))]
    while stack:
        node, parent, it = stack[-1]
        child = next(it, None)
        if child is None:
            stack.pop()
            if parent is not None:
                low[parent] = min(low[parent], low[node])
                if parent != root and low[node] >= disc[parent]:
                    points.add(parent)
            continue
        if child == parent:
            continue
        if child in disc:
            low[node] = min(low[node], disc[child])
            continue
        disc[child] = low[child] = len(disc)
        if node == root:
            root_children += 1
        stack.append((child, node, iter(sorted(adjacency[child]))))
    if root_children > 1:
        points.add(root)


# ----- JSON helpers shared with Solution -----------------------------------------------------
def _number(value) -> int | float:
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _write_text(path, text: str) -> None:
    """Write atomically: a reader never sees half a file."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _load_json(text_or_path, expected_format: str, error: type[Exception]) -> dict:
    if isinstance(text_or_path, (bytes, bytearray)):
        text_or_path = text_or_path.decode("utf-8")
    if isinstance(text_or_path, str) and text_or_path.lstrip().startswith("{"):
        text, origin = text_or_path, "JSON text"
    else:
        try:
            with open(os.fspath(text_or_path), encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise error(f"cannot read {text_or_path!s}: {exc.strerror or exc}") from exc
        origin = os.fspath(text_or_path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if not isinstance(doc, dict) or doc.get("format") != expected_format:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise error(f"{origin}: expected a {expected_format!r} document, found format {found!r}")
    return doc


def _csr(rows) -> tuple[np.ndarray, np.ndarray]:
    """Lists of node indices as int64 arrays (indptr, indices): row k is
    ``indices[indptr[k]:indptr[k+1]]``."""
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(row) for row in rows])
    indices = np.fromiter((i for row in rows for i in row), dtype=np.int64,
                          count=int(indptr[-1]))
    return indptr, indices
