"""The one compiled part of remat: chain-dp's recursions (pure Python otherwise,
and chain-dp falls back to its Python recursions where this does not build)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "remat.solvers._chain_dp_c", ["remat/solvers/_chain_dp_c.c"],
    # no fused multiply-add: the same float results as the Python recursion
    extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)])
