"""``remat demo``: the main job end to end on a built-in model.

Capture one training step of a zoo model (costs profiled on its device), solve it at several
budgets with several methods, run every schedule as a real step, and print, per schedule, the
predicted and the measured peak, the compute overhead, the step time, and whether loss,
gradients and buffers equal the eager step's.
"""
from __future__ import annotations

import copy
import sys
import time

import torch

from remat.bench.common import eager_step
from remat.capture import capture
from remat.errors import InfeasibleBudgetError
from remat.runtime import CompiledStep
from remat.runtime.memory import measure_peak
from remat.solvers import interrupt, solve
from remat.solvers.api import format_bytes
from remat.zoo import load

HEADER = ("method", "budget", "status", "predicted", "measured", "meas/pred", "overhead",
          "time (tracked)", "grads = eager")


def eager_reference(model, inputs, loss_fn):
    """Loss, gradients, buffers and peak of the plain eager step, on a copy of the model.

    Kept as numpy arrays: measure_peak counts every tensor alive, and these must not count
    toward the peaks of the compiled steps measured later."""
    twin = copy.deepcopy(model)
    torch.manual_seed(0)
    loss, peak = measure_peak(eager_step(twin, loss_fn), *inputs)
    grads = {n: _array(p.grad) for n, p in twin.named_parameters() if p.grad is not None}
    buffers = {n: _array(b) for n, b in twin.named_buffers()}
    return _array(loss), grads, buffers, peak


def _array(tensor):
    return tensor.detach().cpu().numpy().copy()


def _close(tensor, array) -> bool:
    return torch.allclose(tensor.detach().cpu(), torch.from_numpy(array))


def matches(model, loss, reference) -> bool:
    ref_loss, ref_grads, ref_buffers, _ = reference
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return (_close(loss, ref_loss) and grads.keys() == ref_grads.keys()
            and all(_close(grads[n], ref_grads[n]) for n in grads)
            and all(_close(b, ref_buffers[n]) for n, b in model.named_buffers()))


def run_schedule(cap, solution, state, inputs, reference) -> tuple:
    """Run one compiled step from the model's original state; (measured peak, seconds, ok)."""
    model = cap.model
    step = CompiledStep(cap, solution)
    restore(model, state)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    start = time.perf_counter()
    loss, peak = measure_peak(step, *inputs)
    seconds = time.perf_counter() - start
    ok = matches(model, loss, reference)
    restore(model, state)
    model.zero_grad(set_to_none=True)
    return peak, seconds, ok


def restore(model, state) -> None:
    """Put back the parameters and buffers saved (as numpy arrays) by ``demo``."""
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            tensor.copy_(torch.from_numpy(state[name]))


def demo(name: str = "unet", budgets=("100%", "90%", "80%"),
         methods=("checkpoint-all", "chen-greedy", "auto"), time_limit: float = 20.0,
         out=sys.stdout, log=sys.stderr) -> list[tuple]:
    model, inputs, loss_fn = load(name, tiny=True)
    print(f"capturing one training step of {name} (tiny) ...", file=log, flush=True)
    start = time.perf_counter()
    cap = capture(model, inputs, loss_fn, cost_model="profile")
    graph = cap.graph
    print(f"  {graph.size} nodes, static {format_bytes(graph.static_mem)}, "
          f"captured and profiled in {time.perf_counter() - start:.1f}s", file=log)
    reference = eager_reference(model, inputs, loss_fn)
    print(f"  eager step peak {format_bytes(reference[3])}", file=log)
    state = {n: _array(t) for n, t in list(model.named_parameters()) + list(model.named_buffers())}
    rows = []
    with interrupt.catching():  # Ctrl-C: stop after the row it cuts short
        for budget, method in ((b, m) for b in budgets for m in methods):
            print(f"  solving {method} at {budget} ...", file=log, flush=True)
            rows.append(_row(cap, method, budget, time_limit, state, inputs, reference))
            if interrupt.requested():
                print("  interrupted: the demo stops here", file=log, flush=True)
                break
    print(render(rows), file=out)
    return rows


def _row(cap, method, budget, time_limit, state, inputs, reference) -> tuple:
    try:
        sol = solve(cap.graph, budget, method=method, time_limit=time_limit)
    except InfeasibleBudgetError as exc:
        return (method, budget, f"infeasible (needs {format_bytes(exc.min_budget)})",
                "-", "-", "-", "-", "-", "-")
    peak, seconds, ok = run_schedule(cap, sol, state, inputs, reference)
    chosen = sol.details.get("chosen")
    label = f"{method} ({chosen})" if chosen else method
    return (label, budget, sol.status, format_bytes(sol.peak_memory), format_bytes(peak),
            f"{peak / sol.peak_memory:.3f}", f"{sol.overhead:.3f}x", f"{seconds * 1e3:.0f} ms",
            "yes" if ok else "NO")


def render(rows) -> str:
    from remat.cli.table import render as render_table

    return render_table([tuple(str(c) for c in r) for r in rows], HEADER)
