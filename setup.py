"""The exec trace's compiled answerer (adr/0032): an optional C extension, loaded with ctypes. Without a C compiler
the install goes on without it and the trace answers every exec from Python (trace/native.py says which)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "relay_shell.trace._answerer",
            sources=["relay_shell/trace/answerer.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=gnu11"],
            optional=True,
        )
    ]
)
