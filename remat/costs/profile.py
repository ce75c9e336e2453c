"""``"profile"`` cost model: time every joint op on the model's device.

The joint graph runs once, op by op, with the model's real tensors, each value freed after its
last use (so memory stays that of one training step). Each op runs ``warmup`` times untimed and
then up to ``repeats`` times timed (fewer for slow ops, see ``ProfileOptions``); its cost is the
median. The graph is functional, so parameters and buffers are only read; the RNG state is
restored afterwards so that profiling leaves no trace. Timings on a shared CPU are noisy.
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
    warmup: int = 1
    """Untimed runs of each op before timing (allocator, caches, lazy init)."""
    repeats: int = 3
    """Most timed runs per op; the cost is their median."""
    op_seconds: float = 0.05
    """Timed runs stop once they have taken this long (but at least one runs): slow ops vary
    little relative to their length, and this keeps big models fast to capture."""


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
    for index, node in enumerate(nodes):
        if node.op == "placeholder":
            env[node.name] = next(args_iter)
        elif node.op == "call_function":
            call_args, call_kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: env[n.name])
            if node.target is operator.getitem:
                env[node.name] = operator.getitem(*call_args)
            else:
                env[node.name], times[node.name] = _timed(node.target, call_args, call_kwargs,
                                                          device, options)
        for name in last_use.get(index, ()):
            env.pop(name, None)
    return times


def _timed(fn, args, kwargs, device, options: ProfileOptions):
    for _ in range(options.warmup):
        out = fn(*args, **kwargs)
        del out
    samples: list[float] = []
    while not samples or (len(samples) < options.repeats and sum(samples) < options.op_seconds):
        out, seconds = _run_once(fn, args, kwargs, device)
        samples.append(seconds)
    return out, statistics.median(samples)


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
