"""The one compiled part of remat: chain-dp's persistent recursion (pure Python otherwise,
and chain-dp falls back to its Python recursion where this does not build)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "remat.solvers._chain_persistent", ["remat/solvers/_chain_persistent.c"],
    # no fused multiply-add: the same float results as the Python recursion
    extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)])
