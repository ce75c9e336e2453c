"""The plan -> fx rewrite, tested on a joint graph captured here by hand (independent of
remat.capture): every valid schedule must give eager's loss, gradients and buffers, run each
op as often as R says, and replay dropout exactly."""
from __future__ import annotations

import contextlib
import copy
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import remat  # noqa: E402
from remat.errors import InvalidScheduleError  # noqa: E402
from remat.runtime.step import CompiledStep, InputMismatchError  # noqa: E402
from remat.schedule import Solution, tighten  # noqa: E402


# ----- a hand-built Capture: one remat node per aten op (getitems join their producer) ---------
@dataclass(frozen=True)
class Spec:
    kind: str
    target: object


@dataclass(frozen=True, eq=False)
class FakeCapture:
    graph: remat.RematGraph
    joint: torch.fx.GraphModule
    node_groups: tuple
    placeholders: tuple
    outputs: tuple
    model: torch.nn.Module
    example_inputs: tuple


class LossWrapper(torch.nn.Module):
    def __init__(self, model, loss_fn):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *inputs):
        return self.loss_fn(self.model, *inputs)


def fake_capture(model, inputs, loss_fn) -> FakeCapture:
    from torch._functorch.aot_autograd import aot_export_joint_with_descriptors

    wrapper = LossWrapper(model, loss_fn)
    exported = torch.export.export(wrapper, tuple(inputs)).module()
    with contextlib.ExitStack() as stack:
        joint = aot_export_joint_with_descriptors(stack, exported, tuple(inputs)).graph_module
    placeholders = tuple(_input_spec(n.meta["desc"]) for n in joint.graph.nodes
                         if n.op == "placeholder")
    output = next(n for n in joint.graph.nodes if n.op == "output")
    outputs = tuple(_output_spec(d) for d in output.meta["desc"])
    groups = _op_groups(joint)
    graph = _remat_graph(joint, groups, model)
    return FakeCapture(graph, joint, groups, placeholders, outputs, model, tuple(inputs))


def _strip(target: str) -> str:
    return target[len("model."):] if target.startswith("model.") else target


def _input_spec(desc) -> Spec:
    name = type(desc).__name__
    if name == "ParamAOTInput":
        return Spec("param", _strip(desc.target))
    if name == "BufferAOTInput":
        return Spec("buffer", _strip(desc.target))
    if name == "PlainAOTInput":
        return Spec("input", desc.idx)
    assert name == "TangentAOTInput", name
    return Spec("tangent", None)


def _output_spec(desc) -> Spec:
    name = type(desc).__name__
    if name == "PlainAOTOutput":
        return Spec("loss", None)
    if name == "GradAOTOutput":
        return Spec("grad", _strip(desc.grad_of.target))
    if name == "InputMutationAOTOutput":
        return Spec("buffer_update", _strip(desc.mutated_input.target))
    return Spec("other", None)


def _op_groups(joint) -> tuple:
    groups, owner = [], {}
    for node in joint.graph.nodes:
        if node.op != "call_function":
            continue
        parent = node.args[0] if node.target.__name__ == "getitem" else None
        if parent is not None and parent.name in owner:
            groups[owner[parent.name]].append(node.name)
            owner[node.name] = owner[parent.name]
        else:
            owner[node.name] = len(groups)
            groups.append([node.name])
    return tuple(tuple(g) for g in groups)


def _remat_graph(joint, groups, model) -> remat.RematGraph:
    owner = {name: i for i, g in enumerate(groups) for name in g}
    nodes = {n.name: n for n in joint.graph.nodes}
    deps, mem, backward = [], [], []
    for i, group in enumerate(groups):
        found = {owner[a.name] for name in group for a in nodes[name].all_input_nodes
                 if a.name in owner and owner[a.name] != i}
        deps.append(sorted(found))
        vals = [nodes[name].meta.get("val") for name in group]
        mem.append(float(sum(v.nbytes for v in vals if isinstance(v, torch.Tensor))))
        backward.append(nodes[group[0]].meta.get("partitioner_tag") == "is_backward")
    static = float(sum(p.nbytes for p in model.parameters()))
    return remat.RematGraph([f"n{i}" for i in range(len(groups))], [1.0] * len(groups), mem,
                            deps, [bool(b) for b in backward], static_mem=static)


# ----- models ---------------------------------------------------------------------------
class SmallCNN(torch.nn.Module):
    """BatchNorm, in-place ReLU, dropout and a residual add."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(6, 6, 3, padding=1)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(6 * 8 * 8, 5)

    def forward(self, x):
        h = self.relu(self.bn(self.conv1(x)))
        h = self.drop(self.conv2(h)) + h
        return self.fc(h.flatten(1))


def cross_entropy(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def cnn_case():
    torch.manual_seed(0)
    return SmallCNN(), (torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])), cross_entropy


def mlp_case(depth=6, width=16, batch=8, dropout=0.5):
    """Tanh MLP with dropout before the head (seed 1): model, inputs, loss_fn."""
    torch.manual_seed(1)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers, torch.nn.Dropout(dropout), torch.nn.Linear(width, 1))
    return model, (torch.randn(batch, width),), lambda m, x: m(x).pow(2).mean()


def eager_step(model, inputs, loss_fn, seed):
    model = copy.deepcopy(model)
    torch.manual_seed(seed)
    loss = model(*inputs) if loss_fn is None else loss_fn(model, *inputs)
    loss.backward()
    return model, loss.detach()


def run_schedule(cap, R, S, seed):
    sol = Solution.from_schedule(cap.graph, R, S, "test", "feasible", None)
    model = copy.deepcopy(cap.model)
    cap = FakeCapture(cap.graph, cap.joint, cap.node_groups, cap.placeholders, cap.outputs,
                      model, cap.example_inputs)
    step = CompiledStep(cap, sol)
    torch.manual_seed(seed)
    loss = step(*cap.example_inputs)
    return step, model, loss


def assert_same_step(eager_model, eager_loss, model, loss, **tolerance):
    """Loss, every gradient and every buffer allclose (default tolerances unless given)."""
    assert torch.allclose(loss, eager_loss, **tolerance)
    for (name, p), q in zip(eager_model.named_parameters(), model.parameters()):
        assert q.grad is not None, name
        assert torch.allclose(p.grad, q.grad, **tolerance), name
    for (name, b), c in zip(eager_model.named_buffers(), model.buffers()):
        same = torch.equal(b, c) if not b.is_floating_point() else torch.allclose(b, c, **tolerance)
        assert same, name


def random_schedules(graph, count, seed):
    """Valid schedules from random keep-sets (tightened), plus checkpoint-all."""
    rng = np.random.default_rng(seed)
    out = [remat.schedule.checkpoint_all(graph)]
    for density in np.linspace(0.0, 0.6, count):
        S = np.tril(rng.random((graph.size, graph.size)) < density, -1)
        out.append(tighten(graph, S))
    return out


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func] += 1
        return func(*args, **(kwargs or {}))


# ----- tests ------------------------------------------------------------------------------
@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small tensors on a shared machine: one intra-op thread is faster and steadier."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cnn():
    model, inputs, loss_fn = cnn_case()
    return fake_capture(model.train(), inputs, loss_fn)


@pytest.fixture(scope="module")
def mlp():
    model, inputs, loss_fn = mlp_case()
    return fake_capture(model.train(), inputs, loss_fn)


@pytest.mark.parametrize("case", ["cnn", "mlp"])
def test_every_schedule_matches_eager(case, request):
    cap = request.getfixturevalue(case)
    eager_model, eager_loss = eager_step(cap.model, cap.example_inputs, _loss_fn(case), seed=7)
    recomputing = 0
    for R, S in random_schedules(cap.graph, 5, seed=3):
        step, model, loss = run_schedule(cap, R, S, seed=7)
        recomputing += int(R.sum() > cap.graph.size)
        assert_same_step(eager_model, eager_loss, model, loss)
    assert recomputing >= 3, "the random schedules should recompute something"


def _loss_fn(case):
    return cnn_case()[2] if case == "cnn" else mlp_case()[2]


def test_recomputed_dropout_replays_its_mask(cnn):
    drop = [i for i, g in enumerate(cnn.node_groups) if any("dropout" in n for n in g)
            and not cnn.graph.is_backward[i]]
    assert drop
    R, S = remat.schedule.checkpoint_all(cnn.graph)
    S = S.copy()
    S[:, drop] = False  # keep nothing produced by dropout: every backward read recomputes it
    R, S = tighten(cnn.graph, S)
    assert (R[:, drop].sum(axis=0) > 1).all()
    eager_model, eager_loss = eager_step(cnn.model, cnn.example_inputs, cross_entropy, seed=11)
    step, model, loss = run_schedule(cnn, R, S, seed=11)
    assert "run_with_rng_state" in step.code
    assert_same_step(eager_model, eager_loss, model, loss)
    # the replay leaves the generator where a plain step leaves it
    _, _, _ = run_schedule(cnn, *remat.schedule.checkpoint_all(cnn.graph), seed=11)
    plain_next = torch.rand(3)
    run_schedule(cnn, R, S, seed=11)
    assert torch.equal(torch.rand(3), plain_next)


def test_executed_ops_follow_R(cnn):
    schedules = random_schedules(cnn.graph, 4, seed=5)
    for R, S in schedules:
        sol = Solution.from_schedule(cnn.graph, R, S, "test", "feasible", None)
        step = CompiledStep(cnn, sol)
        expected = Counter()
        for i, times in enumerate(R.sum(axis=0)):
            for name in cnn.node_groups[i]:
                target = _target(cnn, name)
                if isinstance(target, torch._ops.OpOverload):
                    expected[target] += int(times)
        assert step.op_counts == expected
        assert tuple(R.sum(axis=0)) == step.times_computed
        model = copy.deepcopy(cnn.model)
        fresh = FakeCapture(cnn.graph, cnn.joint, cnn.node_groups, cnn.placeholders,
                            cnn.outputs, model, cnn.example_inputs)
        step = CompiledStep(fresh, sol)
        with OpCounter() as counter:
            step(*cnn.example_inputs)
        executed = Counter({op: n for op, n in counter.counts.items() if op in expected})
        assert executed == expected


def _target(cap, name):
    return next(n.target for n in cap.joint.graph.nodes if n.name == name)


def test_grads_accumulate_like_backward(mlp):
    model, eager_model = copy.deepcopy(mlp.model), copy.deepcopy(mlp.model)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        p.grad, q.grad = torch.ones_like(p), torch.ones_like(q)
    loss_fn = _loss_fn("mlp")
    torch.manual_seed(2)
    eager_loss = loss_fn(eager_model, *mlp.example_inputs)
    eager_loss.backward()
    cap = FakeCapture(mlp.graph, mlp.joint, mlp.node_groups, mlp.placeholders, mlp.outputs,
                      model, mlp.example_inputs)
    sol = Solution.from_schedule(mlp.graph, *random_schedules(mlp.graph, 2, seed=1)[-1],
                                 "test", "feasible", None)
    torch.manual_seed(2)
    loss = CompiledStep(cap, sol)(*mlp.example_inputs)
    assert_same_step(eager_model, eager_loss.detach(), model, loss)
    assert all(p.grad.mean() > 0.5 for p in model.parameters())


def test_invalid_plan_is_rejected_naming_the_node(cnn):
    R, S = remat.schedule.checkpoint_all(cnn.graph)
    sol = Solution.from_schedule(cnn.graph, R, S, "test", "feasible", None)
    user = next(i for i in range(cnn.graph.size) if cnn.graph.deps[i])
    dep = cnn.graph.deps[user][0]
    plan = [step for step in sol.plan if step != ("compute", dep)]
    bad = sol.with_(plan=[("compute", dep), ("free", dep)] + plan)
    with pytest.raises(InvalidScheduleError, match=f"remat node {dep}"):
        CompiledStep(cnn, bad)


def test_wrong_input_shape_raises(cnn):
    sol = Solution.from_schedule(cnn.graph, *remat.schedule.checkpoint_all(cnn.graph), "test",
                                 "feasible", None)
    step = CompiledStep(cnn, sol)
    x, y = cnn.example_inputs
    with pytest.raises(InputMismatchError, match="input 0 .* shape \\[2, 3, 8, 8\\]"):
        step(x[:2], y)
    with pytest.raises(InputMismatchError, match="compiled for inputs shaped like"):
        step(x)
