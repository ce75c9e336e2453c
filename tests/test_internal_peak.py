"""A fused node's internal temporaries are part of its transient workspace.

Values made and freed inside one remat node are in no node's ``mem``; capture replays the
node's ops over the storage map and adds their peak to ``graph.workspace`` (node meta
``internal_bytes``), so the simulator's candidate bounds what the node really holds.
"""
import operator

import pytest

torch = pytest.importorskip("torch")

import remat  # noqa: E402
from remat.capture.internal import internal_peaks  # noqa: E402
from remat.capture.storage import build_storage_map  # noqa: E402
from remat.runtime.step import CompiledStep  # noqa: E402
from remat.schedule import checkpoint_all_peak  # noqa: E402

pytestmark = pytest.mark.torch

ROWS, COLS = 256, 1024
BIG = ROWS * COLS * 4  # bytes of one float32 (256, 1024) tensor


class Doubled(torch.nn.Module):
    """``(x * 2 + 1).sum() * w``: mul, add and sum fuse into one node whose only output is
    the scalar sum, so ``x * 2`` and ``x * 2 + 1`` are temporaries of that node."""

    def __init__(self, transpose: bool = False):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.transpose = transpose

    def forward(self, x):
        doubled = x * 2
        if self.transpose:  # a view keeps its base alive until the view's last read
            doubled = doubled.t()
        return (doubled + 1).sum() * self.w


def _fused_node(graph) -> int:
    found = [k for k, meta in enumerate(graph.node_meta)
             if "add.Tensor" in meta["ops"] and "sum.default" in meta["ops"]]
    assert len(found) == 1, [m["ops"] for m in graph.node_meta]
    return found[0]


@pytest.mark.parametrize("transpose", [False, True])
def test_temporaries_are_the_workspace(transpose):
    x = torch.randn(ROWS, COLS)
    cap = remat.capture(Doubled(transpose), (x,))
    graph = cap.graph
    k = _fused_node(graph)
    # while add runs, x * 2 (its input, last read there) and x * 2 + 1 (its output) are
    # alive; the node's output, the scalar sum (in mem, so already in the candidate), is not
    # made yet: its 4 bytes are room the temporaries use
    assert graph.mem[k] == 4
    assert graph.node_meta[k]["internal_bytes"] == 2 * BIG - 4
    assert graph.node_meta[k]["grad_bytes"] == 0
    assert graph.workspace[k] == 2 * BIG - 4


def test_measured_peak_within_prediction():
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS)
    model = Doubled()
    cap = remat.capture(model, (x,))
    predicted = checkpoint_all_peak(cap.graph)
    _, first = remat.measure_peak(cap.run, x)
    solution = remat.solve(cap.graph, predicted, method="checkpoint-all")
    step = CompiledStep(cap, solution)
    _, second = remat.measure_peak(step, x)  # p.grad now set: the gradient workspace is used
    assert max(first, second) <= predicted
    # the temporaries are real: x and both of them alive at once, 2 MiB more than the old
    # prediction (static_mem, mostly x, plus the scalar outputs)
    assert min(first, second) >= 3 * BIG
    assert predicted <= 1.01 * max(first, second)


def test_unread_tuple_items_count_while_the_tuple_lives():
    """var_mean's mean is never read, but lives until the tuple is freed (after its last
    getitem); hand count at var_mean: x * 2 (8 KiB) + var + mean (256 B each)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        var, _ = torch.ops.aten.var_mean.correction(x * 2, [1])
        return var.sum()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(64, 32))
    gm.graph.eliminate_dead_code()  # drops the unread getitem, as joint graphs have none
    assert sum(n.target is operator.getitem for n in gm.graph.nodes) == 1
    storages = build_storage_map(gm)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    skip = {storages.storage[a.name] for a in output.all_input_nodes}
    internal, with_gradients = internal_peaks(nodes, storages, skip, set())
    assert internal == with_gradients == 64 * 32 * 4 + 2 * 64 * 4
    # with the mean's storage declared a fresh gradient, it leaves the internal peak only
    tuple_op = next(n for n in nodes if "var_mean" in str(n.target))
    mean_free = internal_peaks(nodes, storages, skip, {f"{tuple_op.name}[1]"})
    assert mean_free == (64 * 32 * 4 + 64 * 4, 64 * 32 * 4 + 2 * 64 * 4)
