"""The optional compiled twins of three planning loops (issue 33; seqlen_balancing.native);
the rest of the build is in pyproject.toml.

``optional=True``: where no C compiler is found the build goes on without them, and each
room runs its Python code (the same plans).
"""

from setuptools import Extension, setup

TWINS = ("_c_differencing", "_c_packing", "_c_balance")

setup(
    ext_modules=[
        Extension(
            f"seqlen_balancing.{name}",
            [f"src/seqlen_balancing/{name}.c"],
            depends=["src/seqlen_balancing/_c_ints.h"],
            optional=True,
            extra_compile_args=["-O2"],
        )
        for name in TWINS
    ]
)
