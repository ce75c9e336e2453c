"""remat.compile end to end on CPU: for hand-written models (and the tiny zoo models), every
schedule of every method at budgets 100/70/50/30% (where the method finds one) must give the
eager step's loss, gradients and buffers, a measured peak within 5% of the predicted one,
a predicted peak within the budget, and run each op as often as R says."""
from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import remat  # noqa: E402
from remat.capture import capture  # noqa: E402
from remat.runtime import CompiledStep, InputMismatchError  # noqa: E402
from remat.runtime.cache import cached_solve  # noqa: E402
from test_runtime_rewrite import (OpCounter, assert_same_step,  # noqa: E402,F401
                                  cross_entropy, eager_step, mlp_case, one_thread)

BUDGETS = ("100%", "70%", "50%", "30%")
BASELINES = ("checkpoint-all", "chen-greedy", "chen-sqrtn", "ap-greedy", "griewank")
# milp within a few seconds per budget (status "timeout" returns its best schedule), on the
# hand-written models: the zoo graphs (65-274 nodes) would take minutes per budget here.
MILP_MODELS = ("deep_mlp", "small_cnn", "two_heads")
MILP_OPTIONS = dict(time_limit=2.0)


# models with a node whose workspace puts a floor above 70% under every schedule's peak
HIGH_FLOOR_MODELS = MILP_MODELS + ("unet",)


def budgets_for(name: str) -> tuple[str, ...]:
    """The hand-written models' parameter gradients are large next to their activations, and
    a backward node's gradient workspace is a floor under every schedule's peak (two_heads:
    74% of the range from static memory to the plain step). unet's backward pool nodes
    (max-pool backward, then the skip connection's gradient add) hold their inputs, the pool
    gradient (an internal temporary, in their workspace) and the sum at once: its
    ``peak_lower_bound`` is 75% of the range in autograd's order, 83% in capture's memory order
    (the same bytes, a smaller range). They get an 85% budget too."""
    return ("100%", "85%") + BUDGETS[1:] if name in HIGH_FLOOR_MODELS else BUDGETS


def methods_for(name: str) -> list[tuple[str, dict]]:
    methods = [(m, {}) for m in BASELINES]
    if name in MILP_MODELS:
        methods.append(("milp", MILP_OPTIONS))
    return methods


# ----- hand-written models: a chain with dropout, a CNN (BatchNorm, in-place ReLU, residual,
# dropout), a transformer block on token ids, a model returning a tuple ----------------------
def deep_mlp():
    return mlp_case(depth=10, width=32, batch=256, dropout=0.2)


class ResidualCNN(torch.nn.Module):
    """A stem and three residual blocks (BatchNorm, in-place ReLU, dropout) and a head."""

    def __init__(self, width=8, blocks=3):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.BatchNorm2d(width),
            torch.nn.ReLU(inplace=True), torch.nn.Dropout(0.1)) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 5)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h) + h
        return self.head(h.mean(dim=(2, 3)))


def small_cnn():
    torch.manual_seed(0)
    return ResidualCNN(), (torch.randn(16, 3, 12, 12), torch.randint(0, 5, (16,))), cross_entropy


class TinyTransformer(torch.nn.Module):
    """Token ids in, next-token loss out: embedding, attention, LayerNorm, MLP, dropout."""

    def __init__(self, vocab=50, dim=32, heads=2, blocks=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.1, batch_first=True)
            for _ in range(blocks))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        logits = self.head(h[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 tokens[:, 1:].reshape(-1))


def tiny_transformer():
    torch.manual_seed(2)
    return TinyTransformer(), (torch.randint(0, 50, (8, 16)),), None


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.GELU())
        self.a, self.b = torch.nn.Linear(64, 3), torch.nn.Linear(64, 1)

    def forward(self, x):
        h = self.body(x)
        return self.a(h), self.b(h)


def two_heads():
    torch.manual_seed(3)

    def loss_fn(model, x, target):
        logits, value = model(x)
        return torch.nn.functional.cross_entropy(logits, target) + value.pow(2).mean()

    return TwoHeads(), (torch.randn(64, 16), torch.randint(0, 3, (64,))), loss_fn


MODELS = {"deep_mlp": deep_mlp, "small_cnn": small_cnn, "tiny_transformer": tiny_transformer,
          "two_heads": two_heads}


# ----- helpers ----------------------------------------------------------------------------
def own_bytes(model, inputs) -> int:
    """Bytes of the storages a step starts with: parameters, their gradients, buffers, inputs."""
    sizes = {}
    tensors = list(model.parameters()) + list(model.buffers())
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [x for x in inputs if isinstance(x, torch.Tensor)]
    for t in tensors:
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(sizes.values())


def measured_step(step, model, inputs, seed):
    """Run ``step`` once under storage tracking; returns (loss, peak bytes). Tensors alive in
    the test process that the step does not own (other models, fixtures) are taken out of the
    baseline, so the peak compares with the prediction (static memory + values)."""
    from remat.runtime.memory import StorageTracker

    torch.manual_seed(seed)
    with StorageTracker() as tracker:
        unrelated = tracker.current - own_bytes(model, inputs)
        loss = step(*inputs)
    return loss, tracker.peak - unrelated


def fresh_step(cap, solution):
    """A step for ``solution`` on a fresh copy of the captured model."""
    model = copy.deepcopy(cap.model)
    return CompiledStep(dataclasses.replace(cap, model=model), solution), model


def expected_op_counts(cap, R) -> Counter:
    targets = {n.name: n.target for n in cap.joint.graph.nodes}
    expected = Counter()
    for i, times in enumerate(R.sum(axis=0)):
        for name in cap.node_groups[i]:
            if isinstance(targets[name], torch._ops.OpOverload):
                expected[targets[name]] += int(times)
    return expected


# The captured joint graph of fcn_resnet50 (capture.run, nothing recomputed) differs from the
# eager step by float rounding (up to ~1e-7 absolute, ~1e-6 relative on a few gradients): its
# schedules are held to the captured step at default tolerances, and to eager at these.
EAGER_TOLERANCE = {"fcn_resnet50": dict(rtol=1e-4, atol=1e-6)}

# A fused remat node's internal temporaries (resnet50's
# "layer1.0.bn3+layer1.0.downsample.1+layer1.0+layer1.0.relu" holds both BatchNorm outputs and
# their sum at once) are part of its workspace since capture counts them (node meta
# ``internal_bytes``); before that resnet50 measured 1.060 x predicted and needed 1.07 here.
# Every model is now held to DESIGN.md's 1.05.
PEAK_TOLERANCE: dict[str, float] = {}


def sweep(name, cap, seed=5):
    """Every (method, budget) that solves: checked against eager; returns the peaks."""
    _, inputs, loss_fn = load(name)
    eager_model, eager_loss = eager_step(cap.model, inputs, loss_fn, seed)
    references = [(eager_model, eager_loss, EAGER_TOLERANCE.get(name, {}))]
    if name in EAGER_TOLERANCE:
        captured_model = copy.deepcopy(cap.model)
        torch.manual_seed(seed)
        captured_loss = dataclasses.replace(cap, model=captured_model).run(*inputs)
        references.append((captured_model, captured_loss, {}))
    rows, measured, over = [], {}, []
    for method, options in methods_for(name):
        for budget in budgets_for(name):
            try:
                solution = cached_solve(cap.graph, budget, method, cache=False, **options)
            except remat.InfeasibleBudgetError:
                continue
            except ValueError:
                if method == "griewank":
                    continue  # griewank handles chains only
                raise
            step, model = fresh_step(cap, solution)
            key = (solution.R.tobytes(), solution.S.tobytes())
            if key in measured:  # the same schedule as another method's: check values only
                torch.manual_seed(seed)
                loss, peak = step(*inputs), measured[key]
            else:
                loss, peak = measured_step(step, model, inputs, seed)
                measured[key] = peak
            for ref_model, ref_loss, tolerance in references:
                assert_same_step(ref_model, ref_loss, model, loss, **tolerance)
            assert solution.peak_memory <= remat.parse_budget(budget, cap.graph) * (1 + 1e-9)
            if peak > PEAK_TOLERANCE.get(name, 1.05) * solution.peak_memory:
                over.append((method, budget, peak, solution.peak_memory))
            assert step.op_counts == expected_op_counts(cap, solution.R)
            rows.append((method, budget, solution.peak_memory, peak, int(solution.R.sum())))
    for method, budget, peak, predicted in over:
        print(f"OVER {name} {method} {budget}: measured {peak} = {peak / predicted:.3f} x predicted")
    unexpected = [o for o in over if o[2] > PEAK_TOLERANCE.get(name, 1.05) * o[3]]
    assert not unexpected, f"{name}: measured peak above tolerance x predicted: {unexpected}"
    return rows


def load(name):
    if name in MODELS:
        return MODELS[name]()
    return remat.zoo.load(name, tiny=True)


ZOO = ("vgg16", "vgg19", "resnet50", "mobilenet_v2", "fcn_resnet50", "unet", "gpt2")
SLOW = ("vgg19",)  # VGG16 with three more convolutions: kept out of the quick run


@pytest.fixture(scope="module", params=sorted(MODELS) + [
    pytest.param(f"zoo:{n}", marks=[pytest.mark.slow] if n in SLOW else []) for n in ZOO])
def captured(request):
    name = request.param.removeprefix("zoo:")
    model, inputs, loss_fn = load(name)
    return name, capture(model.train(), inputs, loss_fn, cost_model="flops")


# ----- tests ------------------------------------------------------------------------------
def test_every_feasible_schedule_is_exact_and_within_its_peak(captured):
    name, cap = captured
    rows = sweep(name, cap)
    for row in rows:
        print(name, *row)
    recomputing = [r for r in rows if r[4] > cap.graph.size]
    assert len(rows) >= 4 and recomputing, f"{name}: too few feasible schedules to test"
    if name in MILP_MODELS:
        assert any(r[0] == "milp" and r[1] != "100%" for r in rows), "milp found no schedule"
    # lower budgets give lower measured peaks: per method, and below the plain step overall
    for method, _ in methods_for(name):
        peaks = [r[3] for b in budgets_for(name) for r in rows if r[:2] == (method, b)]
        assert all(low <= 1.01 * high for high, low in zip(peaks, peaks[1:])), (method, peaks)
    plain = next(r[3] for r in rows if r[:2] == ("checkpoint-all", "100%"))
    order = budgets_for(name).index
    lowest = [r for r in rows if order(r[1]) == max(order(q[1]) for q in rows)]
    assert lowest[0][1] != "100%" and min(r[3] for r in lowest) < plain


def test_executed_ops_match_R(captured):
    """Count the aten ops the step really runs (dispatch mode) against R's column sums."""
    name, cap = captured
    solution = _most_recomputing(cap)
    step, model = fresh_step(cap, solution)
    _, inputs, _ = load(name)
    with OpCounter() as counter:
        step(*inputs)
    expected = expected_op_counts(cap, solution.R)
    executed = Counter({op: n for op, n in counter.counts.items() if op in expected})
    assert executed == expected
    assert sum(step.times_computed) == int(solution.R.sum()) > cap.graph.size


def _most_recomputing(cap):
    for method in ("chen-sqrtn", "griewank", "chen-greedy"):
        for budget in ("30%", "50%", "70%", "100%"):
            try:
                solution = cached_solve(cap.graph, budget, method, cache=False)
            except (remat.InfeasibleBudgetError, ValueError):
                continue
            if solution.R.sum() > cap.graph.size:
                return solution
    pytest.fail("no baseline recomputes anything on this graph")


def test_compile_defaults_and_leaves_the_model_untouched(tmp_path):
    model, inputs, loss_fn = small_cnn()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    step = remat.compile(model, inputs, loss_fn, cache=tmp_path)  # budget 60%, auto, profile
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    assert step.solution.peak_memory <= step.solution.budget
    eager_model, eager_loss = eager_step(model, inputs, loss_fn, 9)
    loss, peak = measured_step(step, model, inputs, 9)
    assert_same_step(eager_model, eager_loss, model, loss)
    assert peak <= 1.05 * step.solution.peak_memory


def test_several_steps_with_an_optimizer_match_eager():
    model, inputs, loss_fn = deep_mlp()
    eager = copy.deepcopy(model)
    step = remat.compile(model, inputs, loss_fn, budget="50%", method="griewank",
                         cache=False, cost_model="unit")
    assert step.solution.R.sum() > step.graph.size
    opt, eager_opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
                      for m in (model, eager))
    for seed in range(3):
        torch.manual_seed(seed)
        loss = step(*inputs)
        opt.step()
        opt.zero_grad()
        torch.manual_seed(seed)
        eager_loss = loss_fn(eager, *inputs)
        eager_loss.backward()
        eager_opt.step()
        eager_opt.zero_grad()
        assert torch.allclose(loss, eager_loss.detach())
    for p, q in zip(model.parameters(), eager.parameters()):
        assert torch.allclose(p, q)


def test_other_inputs_raise_a_clear_error():
    model, inputs, loss_fn = deep_mlp()
    step = remat.compile(model, inputs, loss_fn, budget="100%", method="checkpoint-all",
                         cache=False, cost_model="unit")
    with pytest.raises(InputMismatchError, match=r"shape \[256, 32\].*remat.compile"):
        step(torch.randn(8, 32))
    with pytest.raises(InputMismatchError, match="float64"):
        step(inputs[0].double())


def test_infeasible_budget_names_the_smallest():
    model, inputs, loss_fn = deep_mlp()
    with pytest.raises(remat.InfeasibleBudgetError) as info:
        remat.compile(model, inputs, loss_fn, budget="10%", method="chen-greedy", cache=False,
                      cost_model="unit")
    assert info.value.min_budget > info.value.budget


def test_input_that_requires_grad_gets_its_grad():
    model, (x,), loss_fn = deep_mlp()
    x = x[:32].clone().requires_grad_()
    eager_x = x.detach().clone().requires_grad_()
    eager_model, eager_loss = eager_step(model, (eager_x,), loss_fn, 4)
    step = remat.compile(model, (x,), loss_fn, budget="50%", method="griewank", cache=False,
                         cost_model="unit")
    torch.manual_seed(4)
    loss = step(x)
    assert_same_step(eager_model, eager_loss, model, loss)
    assert torch.allclose(x.grad, eager_x.grad)
    with pytest.raises(InputMismatchError, match="requiring grad"):
        step(x.detach())


def test_milp_schedule_within_its_peak_when_grads_accumulate():
    """Tiny VGG16 with a milp schedule, run twice without zeroing the gradients: the second
    step makes each gradient next to the existing ``p.grad`` before adding it in. The largest
    (classifier.0's weight, 784 KiB) once went unpredicted: measured 1.23 x predicted."""
    model, inputs, loss_fn = remat.zoo.load("vgg16", tiny=True)
    cap = capture(model.train(), inputs, loss_fn, cost_model="flops")
    solution = cached_solve(cap.graph, "70%", "milp", cache=False, time_limit=5.0)
    assert solution.R.sum() > cap.graph.size  # it recomputes
    step, model = fresh_step(cap, solution)
    peaks = [measured_step(step, model, inputs, seed)[1] for seed in (0, 1)]
    assert all(p.grad is not None for p in model.parameters())
    assert max(peaks) <= 1.05 * solution.peak_memory, (peaks, solution.peak_memory)
