"""``"profile"`` cost model: time every joint op on the model's device.

The joint graph runs once, op by op, with the model's real tensors (index ops need real
indices), each value freed after its last use, so memory stays that of one training step.
Each op's first run counts as its warm-up: a very slow op (over ``ProfileOptions.
slow_seconds``) keeps its time, any other is run again, and one still slow then (over
``op_seconds``) keeps that second time; a fast one is timed ``repeats`` times (the median). A
fast op whose first run is slow (a one-off cost: a kernel's first call, a page fault, the
shared machine) is so priced by its warm runs, not by that one run. An op
with the same signature (op, shapes, strides, dtypes, arguments) as one already timed reuses
its time: repeated layers cost one measurement. The graph is functional, so parameters and
buffers are only read; the RNG state is restored afterwards so that profiling leaves no
trace. Timings on a shared CPU are noisy.
"""
from __future__ import annotations

import operator
import statistics
import time
from dataclasses import dataclass

import torch
from torch import fx

from remat.costs import per_group


@dataclass(frozen=True)
class ProfileOptions:
    repeats: int = 3
    """Timed runs of a fast op after its first (warm-up) run; its cost is their median."""
    op_seconds: float = 0.02
    """An op whose second (warm) run takes longer keeps that timing: re-running slow ops
    would make big models slow to capture."""
    slow_seconds: float = 0.25
    """An op whose first run takes longer keeps that single timing: one-off costs are small
    against it."""


def profile_costs(cap, options: ProfileOptions = ProfileOptions()) -> list[float]:
    """Seconds per remat node of ``cap``, timed on the model's device."""
    device = _device_of(cap)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        op_times = _time_ops(cap.joint, cap.joint_args(*cap.example_inputs), device, options)
    return per_group(cap, op_times)


def _time_ops(joint: fx.GraphModule, args: list, device, options: ProfileOptions) -> dict[str, float]:
    nodes = list(joint.graph.nodes)
    last_use = _last_uses(nodes)
    env: dict[str, object] = {}
    args_iter = iter(args)
    times: dict[str, float] = {}
    known: dict[tuple, float] = {}
    for index, node in enumerate(nodes):
        if node.op == "placeholder":
            env[node.name] = next(args_iter)
        elif node.op == "call_function":
            call_args, call_kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: env[n.name])
            if node.target is operator.getitem:
                env[node.name] = operator.getitem(*call_args)
            else:
                key = _signature(node.target, call_args, call_kwargs)
                env[node.name], times[node.name] = _timed(node.target, call_args, call_kwargs,
                                                          device, options, known.get(key))
                known[key] = times[node.name]
        for name in last_use.get(index, ()):
            env.pop(name, None)
    return times


def _timed(fn, args, kwargs, device, options: ProfileOptions, known: float | None):
    out, first = _run_once(fn, args, kwargs, device)
    if known is not None:
        return out, known
    if first >= options.slow_seconds or options.repeats < 1:
        return out, first
    samples = []
    for _ in range(options.repeats):
        del out
        out, seconds = _run_once(fn, args, kwargs, device)
        samples.append(seconds)
        if samples[0] >= options.op_seconds:
            break  # slow when warm too: one timing
    return out, statistics.median(samples)


def _signature(target, args, kwargs) -> tuple:
    """What decides an op's run time: the op and its arguments' shapes, strides and dtypes."""
    def describe(value):
        if isinstance(value, torch.Tensor):
            return ("T", tuple(value.shape), value.stride(), value.dtype, value.device.type)
        return repr(value)

    flat = fx.node.map_aggregate((args, kwargs), describe)
    return (str(target), repr(flat))


def _run_once(fn, args, kwargs, device):
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*args, **kwargs)
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1000.0
    begin = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - begin


def _last_uses(nodes: list[fx.Node]) -> dict[int, list[str]]:
    """``index -> names`` of values whose last reader is the node at that index."""
    last: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for arg in node.all_input_nodes:
            last[arg.name] = index
        last.setdefault(node.name, index)
    out: dict[int, list[str]] = {}
    for name, index in last.items():
        out.setdefault(index, []).append(name)
    return out


def _device_of(cap) -> torch.device:
    for tensor in list(cap.model.parameters()) + list(cap.model.buffers()):
        return tensor.device
    for tensor in cap.example_inputs:
        if isinstance(tensor, torch.Tensor):
            return tensor.device
    return torch.device("cpu")


__all__ = ["ProfileOptions", "profile_costs"]
