"""Every fixture pod, posted over HTTPS to the real server (and through the core in-process): its whole outcome."""

from __future__ import annotations

import copy

from tests.support.contexts import as_context
from tests.support.fixtures import PodCase, assert_warnings, pod_cases
from tests.support.reviews import assert_valid_pod
from webhook.core.admission import judge_pod, mutate_verdict, object_subject
from webhook.core.profile import build_profile
from webhook.core.rules import Rules


@pod_cases()
def test_fixture_is_a_valid_pod(case: PodCase) -> None:
    assert_valid_pod(case.pod)


@pod_cases()
def test_profile_class(case: PodCase, rules: Rules) -> None:
    profile = build_profile(case.pod, as_context(rules))
    assert profile.workload == case.workload, profile.classification.reason
    assert profile.multi_node is case.multi_node


@pod_cases()
def test_core_gives_the_whole_outcome(case: PodCase, rules: Rules) -> None:
    """The same outcome from the functions the server calls, in-process (fast: mutation testing runs this)."""
    namespace = case.namespace or case.pod["metadata"].get("namespace", "ml-team")
    subject = object_subject(case.pod, kind="pod", namespace=namespace)
    verdict = judge_pod(copy.deepcopy(case.pod), ctx=as_context(rules), mode="deny", subject=subject)
    assert verdict.allowed is case.allowed
    assert [f.code for f in verdict.findings if f.severity == "deny"] == case.codes
    for fragment in case.message:
        assert fragment in (verdict.message or ""), f"{fragment!r} not in {verdict.message!r}"
    assert_warnings(list(verdict.warnings), case.warnings)
    mutation = mutate_verdict(copy.deepcopy(case.pod), ctx=as_context(rules), mode="deny")
    assert [dict(op) for op in mutation.patch] == case.patch
    assert_warnings(list(mutation.warnings), case.mutation_warnings)
