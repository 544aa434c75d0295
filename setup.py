"""Build step: compile the admission core to C with mypyc; everything else is in setup.cfg.

The core (parsing the review, the profile, classification, findings, mutation, templates) runs on every pod
creation in the cluster, and it is plain typed Python over dicts, which mypyc compiles as it is: the same
sources, about a third fewer instructions per request (see BENCHMARKS.md). The Flask shell and the tooling
stay interpreted. The sources remain the truth: the compiled modules are built from them (``make
compile`` in a checkout, ``pip wheel .`` for the image), and with ``AI_ADMISSION_PURE_PYTHON=1`` set at build
time, or without a C compiler at ``make compile``, ai-admission runs the same code interpreted.
"""

from __future__ import annotations

import os

from setuptools import setup

# The modules on the request path, in the order a review meets them (rules.py: its matchers and signal index
# run for every pod; loading the rules compiled is a side effect).
CORE = [
    "webhook/names.py",
    "webhook/review.py",
    "webhook/admission.py",
    "webhook/templates.py",
    "webhook/kinds.py",
    "webhook/podview.py",
    "webhook/hints.py",
    "webhook/classify.py",
    "webhook/models.py",
    "webhook/parallelism.py",
    "webhook/profile.py",
    "webhook/dra.py",
    "webhook/dra_cel.py",
    "webhook/findings.py",
    "webhook/policy.py",
    "webhook/patch.py",
    "webhook/mutate.py",
    "webhook/quantity.py",
    "webhook/rules.py",
    "webhook/dra_rules.py",
]


def compiled_core() -> list:
    if os.environ.get("AI_ADMISSION_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    # opt_level 2: within noise of 3 here, and gcc takes noticeably less time; no debug info in the image.
    # group_name: the runtime library they share becomes webhook/_core__mypyc*.so, inside the package (by
    # default it is a top-level module named by a hash, which an editable install cannot import).
    return mypycify(["--config-file", "setup.cfg", *CORE], opt_level="2", debug_level="0", group_name="webhook._core")


if __name__ == "__main__":  # as pip's build backend and `python setup.py` run it; tests import CORE only
    setup(ext_modules=compiled_core())
