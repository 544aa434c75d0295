"""Build step: compile the admission core to C with mypyc; everything else is in setup.cfg.

The core (`webhook/core`: parsing the review, the profile, classification, findings, mutation, templates) runs on
every pod creation in the cluster, and it is plain typed Python over dicts, which mypyc compiles as it is: the same
sources, about 40% fewer instructions for the decision in-process (see docs/contributors/benchmarks.md). The Flask
shell and the tooling stay interpreted. The sources remain the truth: the compiled modules are built from them (``make
compile`` in a checkout, ``pip wheel .`` for the image), and with ``AI_ADMISSION_PURE_PYTHON=1`` set at build
time, or without a C compiler at ``make compile``, ai-admission runs the same code interpreted.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

# The compile boundary is a folder: every module of the admission core (`webhook/core`, the request path; pure
# functions over dicts, no I/O, no thread, no metric, as its __init__ says and `make lint` enforces). The rules
# and the core's own package data are loaded compiled too, a side effect.
CORE_DIR = Path(__file__).resolve().parent / "webhook" / "core"
CORE = sorted(str(path.relative_to(CORE_DIR.parent.parent)) for path in CORE_DIR.rglob("*.py")
              if path.name != "__init__.py")  # the package markers (a docstring, re-exports) stay interpreted


def compiled_core() -> list:
    if os.environ.get("AI_ADMISSION_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    # opt_level 2: within noise of 3 here, and gcc takes noticeably less time; no debug info in the image.
    # group_name: the runtime library they share becomes webhook/_core__mypyc*.so, inside the package (by
    # default it is a top-level module named by a hash, which an editable install cannot import). setup.py runs
    # from the checkout's root, so the relative paths of CORE name the sources.
    return mypycify(["--config-file", "setup.cfg", *CORE], opt_level="2", debug_level="0", group_name="webhook._core")


if __name__ == "__main__":  # as pip's build backend and `python setup.py` run it; tests import CORE only
    setup(ext_modules=compiled_core())
