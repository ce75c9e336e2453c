"""The compiled parts of remat: chain-dp's recursions, and ``cheapest_r`` / ``s_from_r`` /
``tighten`` from a fixed point of remat/schedule/rs.py (pure Python otherwise: chain-dp falls
back to its Python recursions, and rs.py to numpy, where these do not build)."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension(
        "remat.solvers._chain_dp_c", ["remat/solvers/_chain_dp_c.c"],
        # no fused multiply-add: the same float results as the Python recursion
        extra_compile_args=["-O2", "-ffp-contract=off"], optional=True),
    Extension("remat.schedule._rs_c", ["remat/schedule/_rs_c.c"],
              extra_compile_args=["-O2"], optional=True),
])
