"""Which modules of the admission core run compiled (setup.py compiles `webhook.core`), and a guard against stale
builds.

In a checkout, ``make compile`` puts the compiled modules next to their sources, and Python imports an
extension module before a ``.py`` of the same name. A source edited after that would be silently ignored, so
`check_fresh` (run when the package is imported from a checkout) refuses to import a compiled module that is
older than its source and says how to fix it. Installed wheels carry both files with install-time stamps and
are never checked.
"""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
RUNTIME_SUFFIX = "__mypyc"  # mypyc's runtime library that the compiled modules share
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)  # ".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ...


def _stem(path: Path) -> str:
    return path.name.split(".", 1)[0]


def _module(path: Path, package_dir: Path) -> str:
    """``core/profile.cpython-311-x86_64-linux-gnu.so`` -> ``core.profile`` (relative to the package)."""
    return ".".join((*path.relative_to(package_dir).parent.parts, _stem(path)))


def compiled_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The extension modules anywhere in the package (``core/profile.cpython-311-x86_64-linux-gnu.so``, ...)."""
    return sorted(p for p in package_dir.rglob("*") if p.name.endswith(_EXTENSIONS))


def built_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The modules built in the package, as dotted names relative to it (``core.profile``), without mypyc's
    shared runtime (``_core__mypyc``)."""
    return sorted(_module(p, package_dir) for p in compiled_files(package_dir)
                  if not _stem(p).endswith(RUNTIME_SUFFIX))


def stale(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The compiled modules whose source changed after they were built."""
    found = []
    for built in compiled_files(package_dir):
        source = built.with_name(_stem(built) + ".py")
        if source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            found.append(_module(built, package_dir))
    return found


def check_fresh(package_dir: Path = PACKAGE_DIR) -> None:
    """Refuse to run compiled code older than its source (a checkout only: setup.py beside the package)."""
    if not (package_dir.parent / "setup.py").exists():
        return
    old = stale(package_dir)
    if old:
        raise ImportError(f"compiled webhook modules are older than their sources ({', '.join(old)}): run "
                          f"`make compile` to rebuild them, or `make pure` to run interpreted")


def running_compiled() -> list[str]:
    """The webhook modules loaded from compiled extensions (empty when running interpreted)."""
    return sorted(name.removeprefix("webhook.") for name, module in list(sys.modules.items())
                  if name.startswith("webhook.") and not name.endswith(RUNTIME_SUFFIX)
                  and str(getattr(module, "__file__", "")).endswith(_EXTENSIONS))
