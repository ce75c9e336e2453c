"""Benchmark models built from code (no weights), each with a realistic default input.

``load(name, tiny=False, batch_size=None) -> (model, example_inputs, loss_fn)``; ``tiny=True``
gives a width-scaled variant of the same architecture on a small input, which captures in a
few seconds on a small CPU. Models and inputs are deterministic (seed 0) and loading leaves
the global RNG state untouched. ``resolve(spec)`` also accepts ``"package.module:factory"``.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Callable

import torch

from remat.errors import RematError


@dataclass(frozen=True)
class Entry:
    build: Callable[[bool], torch.nn.Module]
    inputs: Callable[[bool, int, torch.Generator], tuple]
    loss: str  # "classification" | "segmentation" | "unet" | None (the model returns the loss)
    batch: int
    tiny_batch: int


def _classification(size: int, tiny_size: int, classes: int = 1000, tiny_classes: int = 10):
    def make(tiny, batch, gen):
        side = tiny_size if tiny else size
        n = tiny_classes if tiny else classes
        return (torch.randn(batch, 3, side, side, generator=gen),
                torch.randint(0, n, (batch,), generator=gen))
    return make


def _segmentation(size: int, classes: int, tiny_size: int = 64, channels: int = 3, out=None):
    def make(tiny, batch, gen):
        side = tiny_size if tiny else size
        out_side = out(side) if out else side
        return (torch.randn(batch, channels, side, side, generator=gen),
                torch.randint(0, classes, (batch, out_side, out_side), generator=gen))
    return make


def _tokens(tiny_length: int = 128, length: int = 1024):
    def make(tiny, batch, gen):
        config = _gpt2_config(tiny)
        n = tiny_length if tiny else length
        ids = torch.randint(0, config.vocab_size, (batch, n + 1), generator=gen)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    return make


def _gpt2_config(tiny: bool):
    from remat.zoo.gpt2 import GPT2Config

    if tiny:
        return GPT2Config(vocab_size=256, n_positions=128, n_layer=2, n_head=2, n_embd=64)
    return GPT2Config()


def _vision(name):
    def build(tiny):
        from remat.zoo import vision

        if name in ("vgg16", "vgg19"):
            return vision.vgg(int(name[3:]), tiny, 10 if tiny else 1000)
        if name == "resnet50":
            return vision.resnet50(8, 10) if tiny else vision.resnet50()
        if name == "mobilenet_v2":
            return vision.mobilenet_v2(tiny, 10 if tiny else 1000)
        return vision.fcn_resnet50(tiny)
    return build


def _unet(tiny):
    from remat.zoo.unet import UNet

    return UNet(width=4) if tiny else UNet()


def _unet_out(side):
    from remat.zoo.unet import output_size

    return output_size(side)


def _gpt2(tiny):
    from remat.zoo.gpt2 import GPT2

    return GPT2(_gpt2_config(tiny))


_ENTRIES = {
    "vgg16": Entry(_vision("vgg16"), _classification(224, 64), "classification", 16, 4),
    "vgg19": Entry(_vision("vgg19"), _classification(224, 64), "classification", 16, 4),
    "resnet50": Entry(_vision("resnet50"), _classification(224, 128), "classification", 16, 4),
    "mobilenet_v2": Entry(_vision("mobilenet_v2"), _classification(224, 128), "classification", 16, 4),
    "fcn_resnet50": Entry(_vision("fcn_resnet50"), _segmentation(512, 21, tiny_size=128), "segmentation", 4, 2),
    "unet": Entry(_unet, _segmentation(572, 2, tiny_size=204, channels=1, out=_unet_out), "unet", 2, 2),
    "gpt2": Entry(_gpt2, _tokens(), None, 4, 4),
}
NAMES: tuple[str, ...] = tuple(_ENTRIES)


def _loss_fn(kind):
    if kind is None:
        return None
    from remat.zoo import unet, vision

    return {"classification": vision.classification_loss, "segmentation": vision.segmentation_loss,
            "unet": unet.segmentation_loss}[kind]


def load(name: str, tiny: bool = False, batch_size: int | None = None):
    """``(model, example_inputs, loss_fn)`` for a zoo model (train mode, CPU, seed 0)."""
    if name not in _ENTRIES:
        raise ValueError(f"unknown zoo model {name!r}; choose one of {', '.join(NAMES)}")
    entry = _ENTRIES[name]
    batch = batch_size or (entry.tiny_batch if tiny else entry.batch)
    if batch < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = entry.build(tiny).train()
    inputs = entry.inputs(tiny, batch, torch.Generator().manual_seed(0))
    return model, inputs, _loss_fn(entry.loss)


def resolve(spec: str, tiny: bool = False, batch_size: int | None = None):
    """A zoo name, or ``"package.module:factory"`` where ``factory(**kw)`` returns
    ``(model, example_inputs[, loss_fn])``; ``tiny``/``batch_size`` are passed to the factory
    when its signature takes them."""
    if ":" not in spec:
        return load(spec, tiny=tiny, batch_size=batch_size)
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RematError(f"cannot load model factory {spec!r}: {exc}. Give a zoo name "
                         f"({', '.join(NAMES)}) or 'package.module:function'") from exc
    params = inspect.signature(factory).parameters
    kwargs = {k: v for k, v in (("tiny", tiny), ("batch_size", batch_size))
              if k in params and (v or k == "tiny")}
    result = factory(**kwargs)
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise RematError(f"model factory {spec!r} must return (model, example_inputs) or "
                         f"(model, example_inputs, loss_fn), got {type(result).__name__}")
    model, inputs = result[0], result[1]
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    return model, inputs, (result[2] if len(result) == 3 else None)


__all__ = ["NAMES", "load", "resolve"]
