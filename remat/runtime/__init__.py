"""The runtime: run remat schedules as PyTorch training steps (owned by the runtime helper)."""
