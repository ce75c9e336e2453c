"""Trace one training step into AOTAutograd's joint forward+backward graph.

Route: ``torch.export`` of a wrapper computing the loss, then
``aot_export_joint_with_descriptors`` on the exported module. This keeps BatchNorm's buffer
updates (as input-mutation outputs), functionalises in-place ops and views, tags every node
forward/backward and keeps the module stack, which the grouping needs. Errors of the tracer
are translated into ``UnsupportedModelError`` naming the user's source line or the op.
"""
from __future__ import annotations

import contextlib
import io
import linecache
import logging
import os
import re
import sys
import traceback

import torch
from torch import fx, nn

from remat.errors import UnsupportedModelError

MODEL_ATTR = "model"  # the wrapper's attribute holding the user's model: FQN prefix to strip
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_REMAT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.path.abspath(contextlib.__file__))


class StepModule(nn.Module):
    """``forward(*inputs)`` returns the scalar loss of one training step."""

    def __init__(self, model: nn.Module, loss_fn=None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *inputs):
        if self.loss_fn is not None:
            return _as_loss(self.loss_fn(self.model, *inputs), "loss_fn(model, *inputs)")
        return _as_loss(self.model(*inputs), "model(*inputs)")


def _as_loss(out, what: str) -> torch.Tensor:
    """The scalar loss; a tuple/list whose first item is the loss is accepted (HF style)."""
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.numel() != 1 or not out.is_floating_point():
        got = type(out).__name__ if not isinstance(out, torch.Tensor) else \
            f"a tensor of shape {tuple(out.shape)} and dtype {out.dtype}"
        raise UnsupportedModelError(f"{what} returned {got}; it must return the scalar loss. "
                                    "Pass loss_fn(model, *inputs) -> scalar to capture().")
    return out.reshape(())


def trace_joint(model: nn.Module, inputs: tuple, loss_fn=None):
    """``(joint GraphModule with flat arguments, placeholder descs, output descs)``."""
    from torch._functorch.aot_autograd import aot_export_joint_with_descriptors

    step = StepModule(model, loss_fn)
    with _quiet_tracer():
        exported = _export(step, tuple(inputs))
        try:
            with contextlib.ExitStack() as stack:
                joint = aot_export_joint_with_descriptors(stack, exported.module(), tuple(inputs))
                gm = joint.graph_module
        except Exception as exc:
            line = _line_of_op(exported, getattr(exc, "func", None)) or \
                _generated_code_line(exc) or _last_user_frame(str(exc))
            raise _unsupported(exc, line) from exc
    return _flat_graph_module(gm)


def _export(step: StepModule, inputs: tuple):
    """torch.export the step; on failure torch prints the partial graph to stderr before
    raising, which the error we raise instead makes noise: keep stderr only on success."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            exported = torch.export.export(step, inputs, strict=False)
    except UnsupportedModelError:
        raise
    except Exception as exc:  # translate the tracer's many error types into one
        raise _unsupported(exc) from exc
    sys.stderr.write(captured.getvalue())
    return exported


@contextlib.contextmanager
def _quiet_tracer():
    """Silence the symbolic-shape warnings (with whole graph dumps) that torch logs just before
    raising the error we translate anyway."""
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _line_of_op(exported, op) -> str | None:
    """The user's source line of the first exported node calling ``op`` (from its stack trace)."""
    if op is None:
        return None
    packet = getattr(op, "overloadpacket", op)
    for node in exported.graph_module.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "overloadpacket", node.target) == packet:
            return _last_user_frame(node.meta.get("stack_trace") or "")
    return None


def _generated_code_line(exc: BaseException) -> str | None:
    """The user line recorded (as a ``# File: ...`` comment) above the statement of fx-generated
    code that raised: the exported module runs generated code, not the user's."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<eval_with_key"):
            lines = linecache.getlines(frame.filename)
            for text in reversed(lines[:frame.lineno]):
                match = re.search(r"# File: (\S+?):(\d+) in \w+, code: (.*)", text)
                if match:
                    found = f"{match.group(1)}:{match.group(2)} ({match.group(3).strip()})"
                    break
    return found


def _last_user_frame(stack_trace: str) -> str | None:
    best = None
    for match in re.finditer(r'File "([^"]+)", line (\d+)', stack_trace):
        path = os.path.abspath(match.group(1))
        if not path.startswith((_TORCH_DIR, _REMAT_DIR, _STDLIB_DIR)):
            best = f"{match.group(1)}:{match.group(2)}"
    return best


def _flat_graph_module(gm: fx.GraphModule):
    """Give the joint plain positional arguments and a flat tuple of outputs."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")
    in_descs = [n.meta.get("desc") for n in placeholders]
    out_descs = list(output.meta.get("desc") or [])
    graph._codegen = fx.graph.CodeGen()
    flat_outputs = output.args[0]
    if not isinstance(flat_outputs, (tuple, list)):
        flat_outputs = (flat_outputs,)
    output.args = (tuple(flat_outputs),)
    if len(out_descs) != len(flat_outputs):
        out_descs = (out_descs + [None] * len(flat_outputs))[:len(flat_outputs)]
    new_gm = fx.GraphModule(gm, graph)
    new_gm.recompile()
    return new_gm, in_descs, out_descs


def _unsupported(exc: Exception, line: str | None = None) -> UnsupportedModelError:
    """An UnsupportedModelError naming the user's line (control flow) or the op."""
    op = getattr(exc, "func", None) or _op_in_message(str(exc))
    line = line or _user_line(exc)
    where = f" at {line}" if line else ""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if "DynamicOutputShape" in name:
        text = "its output shape depends on tensor values"
    if "DataDependent" in name or "data-dependent" in str(exc):
        return UnsupportedModelError(
            f"the model's trace depends on tensor values{where} ({text}). remat captures one "
            "static graph per step: replace Python control flow on tensor data (if/while on a "
            "tensor, .item(), .tolist()) by tensor ops such as torch.where, or move it out of "
            "the model.")
    if op is not None:
        return UnsupportedModelError(
            f"capture cannot handle op {op}{where}: {text}. Replace it by standard torch ops or "
            "register a fake (meta) kernel and an autograd formula for it.")
    return UnsupportedModelError(f"capture failed{where}: {name}: {text}")


def _op_in_message(text: str) -> str | None:
    """``namespace::op`` named in a tracer message (custom ops without fake kernel), or None."""
    match = re.search(r"CustomOpDef\(([\w.]+::[\w.]+)\)", text) or \
        re.search(r"\b(\w+::\w+(?:\.\w+)?)", text)
    return match.group(1) if match else None


def _user_line(exc: BaseException) -> str | None:
    """``file:line (code)`` of the innermost traceback frame outside torch, remat and stdlib."""
    best = None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for frame in traceback.extract_tb(exc.__traceback__):
            path = os.path.abspath(frame.filename)
            if path.startswith((_TORCH_DIR, _REMAT_DIR, _STDLIB_DIR)) or path.startswith("<"):
                continue
            best = f"{frame.filename}:{frame.lineno} ({(frame.line or '').strip()})"
        exc = exc.__cause__ or exc.__context__
    return best
