"""Test-wide setup. REMAT_NO_TORCH=1 makes `import torch` fail, to prove the core needs none."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

if os.environ.get("REMAT_NO_TORCH") == "1":
    sys.modules["torch"] = None  # any `import torch` now raises ImportError
