"""The one compiled module, built by the normal install (`pip install -e .` / a wheel).

Everything else is declared in pyproject.toml; setuptools reads ext_modules only from here.
`skiff.fileformat._speedups` is the C twin of the log validator's record walk
(fileformat/_speedups.c). It is optional: without a C compiler the install still succeeds
and `skiff.fileformat.log_validator` runs its pure-Python walk (the reference).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "skiff.fileformat._speedups",
            sources=["fileformat/_speedups.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
