"""Which build of the admission core the tests run against, as `make compile` recorded it.

The tests must pass with the core compiled and interpreted, and must say what they expect in each: comparing
what runs with what is built proves nothing when nothing is built. `make compile` writes the build it made
("compiled" or "pure") into ``.venv/.compiled``; ``AI_ADMISSION_EXPECT_BUILD`` overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from setup import CORE
from tests.conftest import ROOT

BUILD_ENV = "AI_ADMISSION_EXPECT_BUILD"
STAMP = ROOT / ".venv" / ".compiled"


def expected_build() -> str:
    """"compiled" or "pure"; the test is skipped when no build was recorded (pytest run outside make)."""
    build = os.environ.get(BUILD_ENV) or (STAMP.read_text().strip() if STAMP.is_file() else "")
    if build not in ("compiled", "pure"):
        pytest.skip(f"no build recorded: run through `make test`, or set {BUILD_ENV}=compiled|pure")
    return build


def core_modules() -> list[str]:
    """The compiled core's modules as dotted names within the package (``core.profile``, ``core.dra.claims``)."""
    return sorted(".".join(Path(module).with_suffix("").parts[1:]) for module in CORE)


def expected_compiled_modules() -> list[str]:
    """The modules that must run compiled: the whole request path in a compiled build, none in a pure one."""
    return core_modules() if expected_build() == "compiled" else []
