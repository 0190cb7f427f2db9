"""The optional compiled twin of Karmarkar-Karp (issue 33); the rest is in pyproject.toml.

``optional=True``: where no C compiler is found the build goes on without it, and
``seqlen_balancing.differencing`` runs its Python code (the same partitions).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seqlen_balancing._native_differencing",
            ["src/seqlen_balancing/_native_differencing.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
