"""The ledger (`webhook.generate.ledger`): every check of `validate.CHECKS` and every step of `mutate.STEPS` is
accounted for by the native policy, in code, and the judgement is made of nothing else.

A pod the native policy judges whole is called by neither webhook, so a check added to `CHECKS` without an entry
would silently never run for the most common pod. These tests fail the moment one is added, and say what to write.
"""

from __future__ import annotations

from typing import Iterable

import pytest

from webhook.core import mutate, validate
from webhook.core.findings import Finding, warn
from webhook.core.rules import Rules
from webhook.core.validate import CheckContext
from webhook.generate import ledger, native, native_record
from webhook.generate.cel.paths import denied_paths


def test_every_check_and_every_step_is_accounted_for() -> None:
    assert ledger.missing() == [], "\n".join(ledger.missing())
    assert ledger.stale() == [], "\n".join(ledger.stale())


def _labelled_gpu_pod(context: CheckContext) -> Iterable[Finding]:
    """A check a later change might add: a warning for GPU pods carrying a label no fixture has."""
    if context.profile.gpu_count and "team.example.com/legacy" in context.profile.facts.labels:
        yield warn("legacy-team-label", "the team.example.com/legacy label is going away")


def test_a_check_added_with_no_clause_fails_and_says_what_to_write(monkeypatch: pytest.MonkeyPatch,
                                                                   rules: Rules) -> None:
    """The proof: `CHECKS` with one more check and no entry. The test above fails on it, with the words to add, and
    the generator refuses to write a judgement that would skip it."""
    checks = (*validate.CHECKS, _labelled_gpu_pod)
    monkeypatch.setattr(validate, "CHECKS", checks)
    (gap,) = ledger.missing(checks)
    assert "validate.CHECKS has test_ledger._labelled_gpu_pod" in gap
    assert "add test_ledger._labelled_gpu_pod: Judged((<a clause: CEL that holds only where it finds nothing>,)" in gap
    assert "or Exempt(" in gap
    with pytest.raises(AssertionError, match="_labelled_gpu_pod, which webhook/generate/ledger.py's LEDGER does not"):
        assert ledger.missing(checks) == [], "\n".join(ledger.missing(checks))
    with pytest.raises(ledger.UnaccountedError, match="_labelled_gpu_pod"):
        native.class_policy(rules)  # `make generated` stops here, naming it


def test_a_step_added_with_no_clause_fails_too() -> None:
    def add_sidecar(context: object) -> None:
        """A step a later change might add."""

    (gap,) = ledger.missing(steps=(*mutate.STEPS, add_sidecar))
    assert "mutate.STEPS has test_ledger.add_sidecar" in gap and "writes nothing the policy does not" in gap


def test_the_judgement_is_the_ledgers_clauses_and_nothing_else(rules: Rules) -> None:
    """Each clause of every `Judged` entry is in the policy's judgement, and the judgement holds no other."""
    classes = native.native_classes(rules)
    judged = native_record.judging(rules, classes)
    policy, _ = native.class_policy(rules)
    (decided,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "decided"]
    from webhook.generate.cel.text import cel_list, without_bind

    clauses = ledger.clauses(rules, judged)
    assert len(clauses) >= 15
    for clause in clauses:
        assert f"({without_bind(clause)})" in decided, clause
    assert decided == without_bind(f"variables.cls in {cel_list(judged)} && " + " && ".join(f"({c})" for c in clauses))


def test_an_exemption_judges_no_pod_of_the_classes_it_applies_to(rules: Rules) -> None:
    """A queueing backend's checks (`validate._backend`) and words (`mutate.add_backend`) need the cluster's queues
    and the webhook's writes: with a backend chosen, no class judges, so the webhooks keep every pod."""
    from tests.support.builders import rules_with

    assert native.judging_classes(rules) == ["batch", "hpo", "inference", "training"]
    assert native.judging_classes(rules_with({"scheduler": {"backend": "kueue"}})) == []
    assert isinstance(ledger.LEDGER[validate._backend], ledger.Exempt)
    assert isinstance(ledger.LEDGER[mutate.add_backend], ledger.Exempt)


def test_the_backstop_names_the_predicate_of_every_code_it_claims_to_deny(rules: Rules) -> None:
    from webhook.generate.cel import memory, model, paths

    assert ledger.BACKSTOP["gpu-model-missing"] is model.named_in_view
    assert ledger.BACKSTOP["gpu-memory-missing"] is memory.stated_in_view
    for code in denied_paths(rules):
        assert ledger.BACKSTOP[code] is paths.codes_in_view, code
