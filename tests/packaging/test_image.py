"""The container image: the Dockerfile's properties, and its install steps run for real (no Docker engine here).

The build stage installs with `make wheels` and `make install-wheels`; this test runs the same two targets into
a fresh virtual environment and starts the server from it in an empty directory, as the image's entrypoint
does, so a green `make test` means the image's install works.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import requests

from certs import ensure_dev_certs
from tests.conftest import ROOT, free_port
from tests.support.build import core_modules

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    result: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            result.append([])
        result[-1].append(line)
    return result


def test_multi_stage_slim_and_no_compilers_in_the_final_stage() -> None:
    build, final = stages()
    assert re.match(r"FROM python:3\.\d+-slim AS build", build[0])
    assert re.match(r"FROM python:3\.\d+-slim$", final[0])
    final_text = "\n".join(final)
    assert "apt-get" not in final_text and "build-essential" not in final_text and "gcc" not in final_text
    assert "COPY --from=build /opt/ai-admission /opt/ai-admission" in final
    assert not any(i.upper().startswith("HEALTHCHECK") for stage in (build, final) for i in stage)


def test_runs_as_a_numeric_non_root_user_with_gunicorn_and_the_config() -> None:
    _, final = stages()
    (user,) = [i for i in final if i.startswith("USER ")]
    uid = user.split()[1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0
    (entrypoint,) = [i for i in final if i.startswith("ENTRYPOINT ")]
    assert entrypoint == 'ENTRYPOINT ["gunicorn", "-c", "python:webhook.server.gunicorn_conf"]'


def test_install_steps_are_the_makefile_targets() -> None:
    build, _ = stages()
    (install,) = [i for i in build if "make wheels" in i]
    assert "make wheels WHEELS=/wheels PYTHON=/opt/ai-admission/bin/python" in install
    assert "make install-wheels WHEELS=/wheels PYTHON=/opt/ai-admission/bin/python" in install


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "certs/dev", "tests"} <= ignored


def _versions(lines: list[str]) -> dict[str, str]:
    """name (normalised as pip does) -> version, from ``name==version`` lines."""
    found = {}
    for line in lines:
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==", 1)
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


PINNED = _versions((ROOT / "constraints.txt").read_text().splitlines())


def test_the_constraints_pin_every_dependency_within_the_ranges() -> None:
    """constraints.txt pins each runtime dependency of setup.cfg, inside its range (`make lock` writes it)."""
    from packaging.requirements import Requirement

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    for line in config["options"]["install_requires"].split("\n"):
        if not line.strip():
            continue
        requirement = Requirement(line.strip())
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        pinned = PINNED.get(name)
        assert pinned is not None, f"{name} is not pinned in constraints.txt: run make lock"
        assert requirement.specifier.contains(pinned), f"{name}=={pinned} is outside {requirement.specifier}"


def has_c_compiler() -> bool:
    command = str(sysconfig.get_config_var("CC") or "").split()
    return bool(command) and shutil.which(command[0]) is not None


def test_the_image_install_works(tmp_path: Path) -> None:
    if not os.environ.get("AI_ADMISSION_PURE_PYTHON") and not has_c_compiler():
        pytest.skip("no C compiler: the wheel compiles the core (the image's build stage has one)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    for target in ("wheels", "install-wheels"):
        done = subprocess.run(["make", target, f"WHEELS={tmp_path / 'wheels'}", f"PYTHON={python}"], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
    empty = tmp_path / "run"
    empty.mkdir()
    tls = ensure_dev_certs(tmp_path / "tls")
    port = free_port()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "AI_ADMISSION_TLS_DIR": str(tls), "PORT": str(port),
           "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "false", "HOME": str(tmp_path)}
    server = subprocess.Popen([str(venv / "bin" / "gunicorn"), "-c", "python:webhook.server.gunicorn_conf"], cwd=empty,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ready = requests.get(f"https://127.0.0.1:{port}/readyz", verify=str(tls / "ca.crt"), timeout=2)
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, "server from the image install did not start"
                time.sleep(0.2)
        assert ready.status_code == 200
        assert ready.json()["rules"].endswith("site-packages/webhook/default_rules.yaml")
        # the wheel carries the admission core compiled (setup.py), and the server runs it; a build made with
        # AI_ADMISSION_PURE_PYTHON=1 carries and runs none of it compiled
        assert ready.json()["compiled"] == ([] if os.environ.get("AI_ADMISSION_PURE_PYTHON") else core_modules())
    finally:
        server.terminate()
        server.wait(timeout=15)
    version = subprocess.run([str(venv / "bin" / "ai-admission"), "manifests", "webhooks"], cwd=empty, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "ValidatingWebhookConfiguration" in version.stdout
    # exactly what the tests ran with: every package the image installed is at the version constraints.txt pins
    frozen = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=60).stdout
    installed = _versions(frozen.splitlines())
    assert installed.keys() >= {"flask", "gunicorn", "kubernetes", "jsonpatch", "cryptography"}
    assert {name: version for name, version in installed.items() if name in PINNED and PINNED[name] != version} == {}
