"""The rules file: the shipped one loads; bad ones fail with file, path and problem in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT, free_port
from tests.support.builders import broken


def test_server_refuses_to_start_with_bad_rules(tmp_path: Path) -> None:
    bad = tmp_path / "rules.yaml"
    bad.write_text(yaml.safe_dump(broken(lambda d: d["classes"]["batch"].update(preemptible="maybe"))))
    env = {"PATH": str(Path(sys.executable).parent), "PORT": str(free_port()), "AI_ADMISSION_RULES": str(bad),
           "AI_ADMISSION_TLS_DIR": str(tmp_path), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    done = subprocess.run([gunicorn, "-c", "python:webhook.server.gunicorn_conf"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert f"cannot start: {bad}: classes.batch.preemptible: 'maybe' is not of type 'boolean'" in done.stderr
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing left behind in $TMPDIR
