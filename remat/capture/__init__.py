"""Capture one PyTorch training step as a remat graph (the contract: CAPTURE_INTERFACE.md)."""
from remat.capture.capture import Capture, capture
from remat.capture.specs import InputSpec, OutputSpec

__all__ = ["Capture", "InputSpec", "OutputSpec", "capture"]
