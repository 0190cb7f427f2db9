"""The optional compiled twins of the hot loops (issue 33; seqlen_balancing.native): the
planning loops (Karmarkar-Karp, best fit two ways, LPT) and the mask's count; the rest of
the build is in pyproject.toml.

``optional=True``: where no C compiler is found the build goes on without them, and each
room runs its Python code (the same plans).
"""

from setuptools import Extension, setup

#: module (under seqlen_balancing) -> the flags it is compiled with; the mask's count is
#: left to GCC's vectoriser (-O3 makes its 16 byte lanes one compare and one add)
TWINS = {"_c_differencing": "-O2", "_c_packing": "-O2", "_c_balance": "-O2", "batch._c_lengths": "-O3"}

setup(
    ext_modules=[
        Extension(
            f"seqlen_balancing.{name}",
            [f"src/seqlen_balancing/{name.replace('.', '/')}.c"],
            depends=["src/seqlen_balancing/_c_ints.h"],
            optional=True,
            extra_compile_args=[flags],
        )
        for name, flags in TWINS.items()
    ]
)
