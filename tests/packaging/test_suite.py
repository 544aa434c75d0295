"""The suite itself: every test resolves its fixtures, also those that skip on this machine.

The end-to-end tests skip where no API server or scheduler binary is found, and pytest resolves a test's
fixtures only as far as the first one that skips, so a test asking for a fixture that does not exist would pass
unnoticed here and fail where the binaries are. ``pytest --setup-plan`` resolves every fixture of every test
without running any.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_every_test_resolves_its_fixtures() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--setup-plan", "-q", "-p", "no:cacheprovider",
                           "tests/e2e", "tests/server"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "not found" not in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
