"""Where the end-to-end tests find Kubernetes' binaries, each on its own: $KUBEBUILDER_ASSETS, then envtest's
default directory (/usr/local/kubebuilder/bin: a machine that keeps them there needs no variable set), then PATH;
and where none is found, one line saying what is missing (the e2e tests skip with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import control_plane
from tests.support.control_plane import MissingBinaries, find_binaries


def binaries(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        path = folder / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    return folder


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No binary anywhere: an empty envtest directory, no KUBEBUILDER_ASSETS, a PATH of an empty folder."""
    monkeypatch.setattr(control_plane, "ENVTEST_DEFAULT", tmp_path / "envtest-default")
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", str(binaries(tmp_path / "empty-path")))
    return tmp_path


def test_nothing_found_is_one_line_naming_what_is_missing(nowhere: Path) -> None:
    with pytest.raises(MissingBinaries) as missing:
        find_binaries()
    assert str(missing.value) == "no kube-apiserver/etcd: run `make e2e-deps` or set KUBEBUILDER_ASSETS"


def test_envtests_default_directory_needs_no_variable(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = binaries(nowhere / "envtest-default", "kube-apiserver", "etcd", "kube-scheduler",
                       "kube-controller-manager")
    found = find_binaries()
    assert (found.apiserver, found.etcd, found.scheduler, found.controller_manager) == (
        default / "kube-apiserver", default / "etcd", default / "kube-scheduler", default / "kube-controller-manager")


def test_the_variable_comes_first_and_each_binary_is_found_on_its_own(nowhere: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    binaries(nowhere / "envtest-default", "kube-apiserver", "etcd")
    assets = binaries(nowhere / "assets", "kube-apiserver")
    on_path = binaries(nowhere / "bin", "kube-scheduler")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("PATH", str(on_path))
    found = find_binaries()
    assert found.apiserver == assets / "kube-apiserver"
    assert found.etcd == nowhere / "envtest-default" / "etcd"
    assert found.scheduler == on_path / "kube-scheduler" and found.controller_manager is None
