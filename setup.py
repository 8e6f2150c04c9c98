"""The exec trace's compiled answerer (adr/0032) and native spawner (adr/0036): an optional C extension, loaded with
ctypes. Without a C compiler the install goes on without it and the trace answers every exec and spawns every tree
from Python (trace/native.py says which)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "relay_shell.trace._answerer",
            sources=["relay_shell/trace/answerer.c", "relay_shell/trace/spawner.c", "relay_shell/trace/spares.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=gnu11"],
            optional=True,
        )
    ]
)
