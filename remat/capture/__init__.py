"""Capture one PyTorch training step as a remat graph (the contract: CAPTURE_INTERFACE.md)."""
from remat.capture.capture import Capture, capture
from remat.capture.specs import InputSpec, OutputSpec

__all__ = ["Capture", "InputSpec", "OutputSpec", "capture"]


class _CallableModule(type(__import__("sys"))):
    """``remat.capture`` is both this package and the function: importing the package makes
    it shadow the lazy ``remat.capture`` function, so the package itself forwards calls."""

    def __call__(self, *args, **kwargs):
        return capture(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
