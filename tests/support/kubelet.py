"""A volume laid out as the kubelet lays out a ConfigMap or Secret volume (its ``AtomicWriter``): the data in a
version directory ``..<timestamp>``, ``..data`` a link to it, and each key a link ``key -> ..data/key``. An update
writes a new version, swaps ``..data`` in one rename and removes the old version, so a reader never sees half of
one; a server that watches the file must follow the links to see the change."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

_versions = itertools.count(1)


class KeyDir:
    """A mounted ConfigMap or Secret: ``keys`` (name -> bytes) under ``root``; `update` as the kubelet updates it."""

    def __init__(self, root: Path, keys: dict[str, bytes]) -> None:
        self.root = root
        root.mkdir()
        self.keys: dict[str, bytes] = {}
        self.update(keys)

    def update(self, keys: dict[str, bytes]) -> None:
        version = self.root / f"..2026_12_02_07_00_00.{next(_versions)}"
        version.mkdir()
        for name, data in keys.items():
            (version / name).write_bytes(data)
        data_link = self.root / "..data"
        previous = data_link.resolve() if data_link.is_symlink() else None
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, data_link)  # the one atomic step
        for name in keys.keys() - self.keys.keys():
            (self.root / name).symlink_to(f"..data/{name}")
        for name in self.keys.keys() - keys.keys():
            (self.root / name).unlink()
        if previous is not None:
            shutil.rmtree(previous)
        self.keys = dict(keys)
