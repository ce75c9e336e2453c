"""Every zoo model (tiny) captures into a valid graph whose checkpoint-all peak matches the
measured peak of the captured step within 10% (the plain eager step's peak is printed too)."""
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import remat  # noqa: E402
from remat.bench.common import eager_step  # noqa: E402
from remat.schedule import checkpoint_all_peak  # noqa: E402
from remat.zoo import NAMES, load, resolve  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_tiny_zoo_model_captures_and_peak_matches(name):
    model, inputs, loss_fn = load(name, tiny=True)
    # numpy copy: measure_peak counts every live tensor, and this copy is not the step's
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    cap = remat.capture(model, inputs, loss_fn, cost_model="unit")
    graph = cap.graph
    predicted = checkpoint_all_peak(graph)
    torch.manual_seed(0)
    loss_run, measured = remat.measure_peak(cap.run, *inputs)
    del cap
    model.zero_grad(set_to_none=True)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    torch.manual_seed(0)
    loss_eager, eager = remat.measure_peak(eager_step(model, loss_fn), *inputs)
    print(f"\n{name}: {graph.size} nodes ({len(graph.forward_nodes)} forward), static "
          f"{graph.static_mem / 2**20:.2f} MiB, predicted {predicted / 2**20:.2f} MiB, measured "
          f"run {measured / 2**20:.2f} MiB ({predicted / measured:.3f}x), eager "
          f"{eager / 2**20:.2f} MiB ({eager / measured:.3f}x of run)", file=sys.stderr)
    assert torch.allclose(loss_run, loss_eager)
    # p.grad is None in this first step: each fresh gradient becomes p.grad (already static),
    # so only the internal temporaries of the workspace are used; tiny VGGs peak at the node
    # with the largest gradient (classifier.0, 784 KiB), so the full prediction is 1.25 x
    # there. The loosest first-step prediction is unet's in memory order, 1.147 x. Its peak
    # node is the first max-pool backward: the model holds the node's inputs until it ends
    # (the run frees the pool's indices and incoming gradient before the add allocates) and
    # frees the forward pool's two outputs together (the run frees each after its own last
    # read). gpt2's is 1.119 x (capture_notes.md).
    first_step = checkpoint_all_peak(graph.with_workspace(
        [float(m["internal_bytes"]) for m in graph.node_meta]))
    assert measured <= predicted * 1.05
    assert measured <= first_step * 1.05
    assert first_step <= 1.15 * measured


def test_load_options_and_errors():
    model, (images, labels), loss_fn = load("vgg16", tiny=True, batch_size=3)
    assert images.shape[0] == labels.shape[0] == 3 and loss_fn is not None
    model, (ids, targets), loss_fn = load("gpt2", tiny=True)
    assert ids.dtype == torch.int64 and loss_fn is None
    with pytest.raises(ValueError, match="unknown zoo model"):
        load("alexnet")


def test_load_is_deterministic_and_keeps_rng():
    state = torch.get_rng_state()
    first, _, _ = load("unet", tiny=True)
    second, _, _ = load("unet", tiny=True)
    assert torch.equal(state, torch.get_rng_state())
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)


def factory(tiny=False, batch_size=None):
    """A ``package.module:factory`` target for resolve()."""
    model = torch.nn.Linear(3, 1)
    return model, (torch.randn(batch_size or 2, 3),), lambda m, x: m(x).square().mean()


def test_resolve_factory_spec():
    model, inputs, loss_fn = resolve("test_zoo:factory", batch_size=5)
    assert inputs[0].shape == (5, 3) and loss_fn is not None
    model, inputs, loss_fn = resolve("mobilenet_v2", tiny=True)
    assert inputs[0].shape[0] == 4
    with pytest.raises(remat.RematError, match="cannot load model factory"):
        resolve("no_such_module_xyz:factory")
