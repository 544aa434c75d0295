"""PriorityClasses watched in the background: a missing one is not set on pods, and one whose value or
preemptionPolicy differs from the rules is set without them (the API server fills them in)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.conftest import RULES_FILE
from tests.support.builders import priority_class
from tests.support.kubeapi import FakeKubeAPI
from webhook.cluster.informer import Api
from webhook.cluster.priority_classes import PriorityClassWatch
from webhook.config.rules_file import load_rules
from webhook.config.settings import Settings

CHECK_ENV = "AI_ADMISSION_CHECK_PRIORITY_CLASSES"




RULES_SPECS = [policy.priority_class for policy in load_rules(RULES_FILE).classes.values() if policy.priority_class]




def eventually(check: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def test_api_errors_keep_the_last_answer() -> None:
    training = {"metadata": {"name": "ai-training"}, "value": 100000, "preemptionPolicy": "PreemptLowerPriority"}
    hpo = {"metadata": {"name": "ai-hpo"}, "value": 7}  # no preemptionPolicy: the API server's default
    answers: list[Any] = [([training, hpo], "1")]

    def lister(path: str) -> tuple[list[dict[str, Any]], str]:
        assert path == "/apis/scheduling.k8s.io/v1/priorityclasses"
        if answers:
            return answers.pop(0)
        raise RuntimeError("connection refused")

    def watcher(path: str, version: str, seconds: float) -> Iterator[dict[str, Any]]:
        return iter(())  # the server ends each watch at once; the resync lists again

    seen: list[Any] = []
    watch = PriorityClassWatch(lambda: RULES_SPECS, api=lambda: Api(lister, watcher), resync=0.05,
                               on_change=seen.append)
    watch.start()
    try:
        eventually(lambda: len(seen) >= 2)
    finally:
        watch.stop()
    first, second = seen[0], seen[1]
    assert first.checked and first.missing_priority_classes == {"ai-batch", "ai-inference"} and first.error is None
    assert first.differing_priority_classes == {"ai-hpo": "value 7, preemptionPolicy PreemptLowerPriority in the "
                                                          "cluster; the rules say value 10000, preemptionPolicy "
                                                          "PreemptLowerPriority"}
    assert second.missing_priority_classes == {"ai-batch", "ai-inference"}
    assert second.differing_priority_classes == first.differing_priority_classes
    assert second.error == "RuntimeError: connection refused"


@pytest.mark.parametrize(("setting", "in_cluster", "enabled"), [
    (None, False, False),  # the default, auto: off outside a cluster
    (None, True, True),    # auto inside a pod (the API server's address in the environment)
    ("auto", True, True), ("false", True, False), ("true", False, True), ("TRUE", False, True),
])
def test_auto_is_on_only_inside_a_cluster(tmp_path: Path, setting: str | None, in_cluster: bool,
                                          enabled: bool) -> None:
    with FakeKubeAPI() as api:
        api.add("priorityclasses", priority_class("ai-training"))
        env = {"KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig"))}
        if setting is not None:
            env[CHECK_ENV] = setting
        if in_cluster:
            env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"
        assert Settings.from_environ(env).priority_class_watch is enabled
        if not enabled:
            return
        # it really watches the API (in-cluster config is absent here: the kubeconfig)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("KUBECONFIG", env["KUBECONFIG"])
            patch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
            watch = PriorityClassWatch(lambda: [spec for spec in RULES_SPECS
                                                if spec.name in ("ai-training", "ai-batch")]).start()
            try:
                eventually(lambda: watch.state.checked)
                assert watch.state.missing_priority_classes == {"ai-batch"}
                api.add("priorityclasses", priority_class("ai-batch"))  # seen through the watch, not a resync
                eventually(lambda: not watch.state.missing_priority_classes)
            finally:
                watch.stop()
