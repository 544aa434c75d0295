"""The decision cache answers a burst of identical pods from memory and never with a stale or wrong verdict."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.conftest import RULES_FILE
from tests.support.contexts import as_context
from tests.support.e2e_install import BARE_POD, PROFILED_POD
from tests.support.reviews import admission_review
from webhook.config.rules_file import load_rules
from webhook.core.admission import MUTATE, VALIDATE, decide, respond, route_of
from webhook.core.review import parse_review
from webhook.core.rules import compile_rules
from webhook.core.view.priority_state import PriorityClassState
from webhook.server.decision_cache import DecisionCache

RULES = load_rules(RULES_FILE)
UNCHECKED_STATE = PriorityClassState()


def request(pod: dict[str, Any], *, name: str = "", namespace: str = "ml-team", **review: Any) -> Any:
    pod = copy.deepcopy(pod)
    pod["metadata"] = {**pod["metadata"], "name": name, "uid": f"uid-{name}",
                       "managedFields": [{"manager": "kubectl", "time": f"2026-12-01T00:00:{len(name):02d}Z"}]}
    return parse_review(admission_review(pod, namespace=namespace, name=name, **review))


def cached(cache: DecisionCache, req: Any, *, endpoint: str = MUTATE, rules: Any = RULES, state: Any = UNCHECKED_STATE,
           path_mode: str | None = None) -> Any:
    route = route_of(req, rules=rules, endpoint=endpoint, path_mode=path_mode)
    return cache.decide(req, route, ctx=as_context(rules, priority_classes=state), endpoint=endpoint, decide=decide)


def fresh(req: Any, *, endpoint: str = MUTATE, rules: Any = RULES, state: Any = UNCHECKED_STATE,
          path_mode: str | None = None) -> Any:
    return decide(req, ctx=as_context(rules, priority_classes=state), endpoint=endpoint, path_mode=path_mode)


def test_pods_differing_only_in_name_share_a_decision_and_keep_their_uid() -> None:
    cache = DecisionCache()
    first, second = request(PROFILED_POD, name="train-a"), request(PROFILED_POD, name="train-b")
    verdict = cached(cache, first)
    assert cached(cache, second) is verdict and cache.hits == 1
    assert respond(second, verdict)["response"]["uid"] == second.uid != first.uid
    assert respond(second, verdict) == respond(second, fresh(second))


def test_a_denial_names_its_own_pod() -> None:
    cache = DecisionCache()
    for name in ("bare-a", "bare-b"):
        req = request(BARE_POD, name=name)
        verdict = cached(cache, req, endpoint=VALIDATE)
        assert f'pod "ml-team/{name}"' in verdict.message
        assert verdict.message == fresh(req, endpoint=VALIDATE).message


def test_what_the_decision_reads_is_in_the_key() -> None:
    cache = DecisionCache()
    base = request(BARE_POD, name="p")
    cases = [
        (request(BARE_POD, name="p", namespace="other"), {}),                      # namespace (messages, modes)
        (base, {"endpoint": VALIDATE}),                                             # endpoint
        (base, {"endpoint": VALIDATE, "path_mode": "warn"}),                        # mode of the path
        (request({**BARE_POD, "metadata": {"labels": {"spark-role": "executor"}}}, name="p"), {}),  # the pod
        (request(BARE_POD, name="p", operation="UPDATE"), {}),                      # only CREATE is remembered
    ]
    for req, options in cases:
        assert respond(req, cached(cache, req, **options)) == respond(req, fresh(req, **options))
    assert cache.hits == 0


def test_new_rules_or_cluster_facts_empty_it() -> None:
    cache = DecisionCache()
    req = request(BARE_POD, name="p")
    assert cached(cache, req, endpoint=VALIDATE).allowed is False
    document = yaml.safe_load(RULES_FILE.read_text())
    document["modes"]["default"] = "warn"
    warn_rules = compile_rules(document, source="reloaded")
    assert cached(cache, req, endpoint=VALIDATE, rules=warn_rules).allowed is True  # a reload: not the old denial
    assert len(cache) == 1
    state = PriorityClassState(missing_priority_classes=frozenset({"ai-batch"}), checked=True)
    patch = cached(cache, req, rules=warn_rules, state=state).patch
    assert not any(op["path"] == "/spec/priorityClassName" for op in patch)  # the missing class is not set
    assert cache.hits == 0


def test_bounded() -> None:
    cache = DecisionCache(size=3)
    for index in range(10):
        pod = {**PROFILED_POD, "metadata": {**PROFILED_POD["metadata"], "labels": {"n": str(index)}}}
        cached(cache, request(pod, name="p"))
    assert len(cache) == 3
