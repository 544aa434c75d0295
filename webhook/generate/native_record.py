"""The pod the native policy judges whole: the profile record it writes, the mark of its judgement, and the webhooks'
condition that then leaves the pod out, so the common GPU pod costs the webhooks no call at all.

The native policy (`webhook.generate.native`) gives a pod what `webhook.core.mutate` gives it from its class's
settings; the webhook, running after it, adds the rest. For the common pod the rest is one annotation, the profile
record (`mutate.record_profile`), and the webhook's validation finds nothing. Here that pod is recognised in CEL:
``variables.decided`` is the conjunction of the clauses the ledger (`webhook.generate.ledger`) gives for every
check of `webhook.core.validate.CHECKS` and every step of `webhook.core.mutate.STEPS`, each holding only where its
check finds nothing or its step writes nothing the policy does not write itself. Where it holds the policy writes
the record (``variables.record``, the webhook's text to the byte: `webhook.generate.cel.record`) and marks the pod
(``ai-admission.io/judged-by: native-policy``); the webhooks' condition added by the native component
(`webhook_condition`) leaves out a pod of a judging class that carries the mark. Where it does not hold, the policy
removes a mark the pod was sent with, so a mark written by hand never keeps a pod from the webhooks while the policy
runs.

What depends on the cluster is looked up in the facts the server writes (`webhook.core.view.cluster_facts`): the
model index, each present model's card (its memory, GPUs per node, vendor and interconnect) and the state of the
classes' PriorityClasses. With no node known, no pod is judged natively.
"""

from __future__ import annotations

from typing import Mapping

from webhook.core import names
from webhook.core.patch import pointer
from webhook.core.rules import ClassSettings, Rules
from webhook.core.view.cluster_facts import CARD, PRIORITY_CLASSES

from . import ledger
from .cel.memory import memory_bytes, stated_plainly
from .cel.record import record_text
from .cel.text import cel_list, cel_string, remove, unbound

JUDGE = "native-policy"  # the value of ai-admission.io/judged-by the native policy writes
CONDITION_NAME = "not-judged-natively"


def judging(rules: Rules, classes: Mapping[str, ClassSettings]) -> dict[str, ClassSettings]:
    """The classes whose pods the policy may judge whole (no exemption of the ledger applies to them)."""
    return {w: s for w, s in classes.items() if ledger.judges(rules, s)}


def priority_state(classes: Mapping[str, ClassSettings]) -> str:
    """``variables.priorityState``: ``as-rules`` where the cluster has the class's PriorityClass as the rules say
    (or the server has not checked yet, as the webhook assumes), ``differs``, ``missing`` (the facts'
    ``priorityClasses``: ``,name=state,``)."""
    names_of = "{" + ", ".join(f"{cel_string(w)}: {cel_string(s.priority_class.name)}"
                               for w, s in sorted(classes.items()) if s.priority_class is not None) + "}"
    return (f"cel.bind(pn, {names_of}[?variables.cls].orValue(''), cel.bind(ps, variables.facts[?"
            f"{cel_string(PRIORITY_CLASSES)}].orValue(''), pn == '' ? 'none' : ps == '' ? 'as-rules' : "
            f"ps.contains(',' + pn + '=differs,') ? 'differs' : ps.contains(',' + pn + '=as-rules,') ? 'as-rules' : "
            f"'missing'))")


def variables(rules: Rules, classes: Mapping[str, ClassSettings]) -> list[dict[str, str]]:
    """``card`` (the facts of a model a node has), ``gpus``, ``decided`` and ``record``; the policy's own variables
    come first (`webhook.generate.native`)."""
    card = (f"variables.model != '?' && variables.model != '' ? "
            f"variables.facts[?({cel_string(CARD)} + variables.model)].orValue('').split('|') : []")
    judged = judging(rules, classes)
    decided = " && ".join(f"({c})" for c in ledger.clauses(rules, judged))
    return unbound([{"name": "card", "expression": card},
                    {"name": "gpus", "expression": "variables.appGpus.sum()"},
                    # the bytes per GPU the annotation states, where it states them plainly (-1: it does not)
                    {"name": "memoryBytes", "expression": f"{stated_plainly(rules)} ? {memory_bytes()} : -1"},
                    {"name": "decided",
                     "expression": f"variables.cls in {cel_list(judged)} && {decided}" if judged else "false"},
                    {"name": "record", "expression": f"variables.decided ? "
                                                     f"{record_text(judged, memory_bytes='variables.memoryBytes')} : ''"}])


def record_entries() -> list[tuple[str, str, str]]:
    """The record and the mark of the judgement, as (annotation, condition, value) of the policy's writes."""
    return [(names.PROFILE, "variables.record != ''", "variables.record"),
            (names.JUDGED_BY, "variables.record != ''", cel_string(JUDGE))]


def forged_patch() -> str:
    """A mark the pod came with, removed where the policy does not judge the pod: it never keeps a pod from the
    webhooks while the policy runs."""
    path = pointer(("metadata", "annotations", names.JUDGED_BY))
    return (f"{cel_string(names.JUDGED_BY)} in object.metadata.?annotations.orValue({{}}) && variables.record == '' ? "
            f"[{remove(cel_string(path))}] : []")


def judged_natively(priority_classes: Mapping[str, str]) -> str:
    """A pod created with a judging class and the mark of a judgement (`webhook_condition`)."""
    notes = "object.metadata.?annotations.orValue({})"
    chosen = "{" + ", ".join(f"{cel_string(w)}: {cel_string(p)}" for w, p in sorted(priority_classes.items())) + "}"
    return (f"request.resource.resource == 'pods' && request.operation == 'CREATE' && "
            f"(!has(request.subResource) || request.subResource == '') && "
            f"{notes}[?{cel_string(names.JUDGED_BY)}].orValue('') == {cel_string(JUDGE)} && "
            f"{chosen}[?{notes}[?{cel_string(names.WORKLOAD_TYPE)}].orValue('')].orValue('-') == "
            f"object.spec.?priorityClassName.orValue('') && "
            f"size(object.spec.?resourceClaims.orValue([])) == 0")


def webhook_condition(priority_classes: Mapping[str, str]) -> dict[str, str]:
    """The webhooks' ``matchConditions`` entry the native component adds: a pod created with a judging class and the
    mark of a judgement was judged whole by the native policy (which runs before every webhook, and removes a mark
    it did not write), so neither webhook is called for it. A mark, not the record: the mutating webhook writes the
    record of every pod it profiles, and the validating webhooks must still judge those.

    ``priority_classes``: each judging class's PriorityClass. Where the policy did not run (its parameter not there,
    or an error it was told to ignore), a mark written by hand would skip the webhooks; the backstop still holds the
    pod to a model, a memory and no bypass, and this condition to what else the webhook would deny of someone else's
    business: the PriorityClass the policy writes (a pod judged whole named none), and no resource claims."""
    return {"name": CONDITION_NAME, "expression": f"!({judged_natively(priority_classes)})"}
