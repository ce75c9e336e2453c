"""Run solved schedules as real PyTorch training steps (``remat.compile``)."""
from remat.runtime.cache import PlanCacheWarning, cached_solve, default_cache_dir
from remat.runtime.compile import compile
from remat.runtime.step import CompiledStep, InputMismatchError

__all__ = ["CompiledStep", "InputMismatchError", "PlanCacheWarning", "cached_solve", "compile",
           "default_cache_dir"]
