"""The pod the native set judges whole: the profile record written by the class policy, and the webhooks' condition
that then leaves the pod out, so the common GPU pod costs the webhook no call at all.

A class policy (`webhook.generate.native`) gives a pod what `webhook.core.mutate` gives it from the class's
settings; the webhook, running after it, adds the rest. For the common pod the rest is one annotation, the profile
record (`mutate.record_profile`), and the webhook's validation finds nothing. Here that pod is recognised in CEL:
``variables.decided`` holds only where every step of the webhook's would write nothing more and every check of
its validation (`webhook.core.validate.CHECKS`) would find nothing, each clause below naming the step or check it
stands for. Where it holds the policy writes the record itself (``variables.record``, the webhook's text to the
byte) and marks the pod (``ai-admission.io/judged-by: native-policy``), and the webhooks' condition added by the
native component (`webhook_condition`) leaves out a pod of a native class that carries the mark. Where it does
not hold, the policy removes a mark the pod was sent with, so a mark written by hand never keeps a pod from the
webhooks while the policy runs.

It holds for a pod that:

- names its model by a nodeSelector on a model label only (so `mutate.pin_model` has nothing to pin), the facts'
  model index holds that name, and a node of the cluster has the model (the facts hold its card; else
  `validate._model_not_in_cluster` warns);
- asks for whole GPUs of one listed resource of the model's vendor, in its app containers only, each request equal
  to its limit, no more than one node of the model holds (`validate._gpu_findings`), and no more memory per GPU,
  stated by ``ai-admission.io/gpu-memory`` in whole MiB, GiB or TiB, than one card holds;
- carries no other ai-admission annotation (no hint the webhook could refuse or read otherwise), names no
  PriorityClass (`validate._priority_finding`), and is one pod (not multi-node: NCCL, gang and RDMA are for
  multi-node pods);
- gives the webhook nothing to warn of: a memory limit (the ``/dev/shm`` size), memory for its GPU containers,
  Guaranteed QoS where the class asks, no tensor parallelism over PCIe, no spread key its nodes lack, no
  path to a GPU the bypass checks look at, no container the webhook would void.

Everything else goes to the webhook as before. The facts come from the server (`webhook.core.view.cluster_facts`):
with no node known, no pod is judged natively. What the webhook alone knows is lost for the pods judged here: a
PriorityClass the cluster lacks or holds with another value (the webhook's warning; the priority is written
either way). docs/admins/native.md says so.
"""

from __future__ import annotations

from typing import Mapping

from webhook.core import names
from webhook.core.classify import annotated_reason
from webhook.core.patch import pointer
from webhook.core.quantity import BINARY_UNITS
from webhook.core.rules import ClassSettings, Rules
from webhook.core.view.cluster_facts import CARD

from .backstop import PLAIN_MEMORY, PLAIN_SUFFIXES, byte_quantity, plainly_clear, pod_containers, without_bind
from .match_conditions import cel_list, cel_string

UNITS = {suffix: BINARY_UNITS[suffix] for suffix in PLAIN_SUFFIXES}  # of the gpu-memory annotations judged here
MEMORY = PLAIN_MEMORY  # the gpu-memory annotations the record writes back as written (whole Mi, Gi, Ti)
OWN_ANNOTATIONS = (names.WORKLOAD_TYPE, names.GPU_MEMORY, names.PROFILE, names.JUDGED_BY)
JUDGE = "native-policy"  # the value of ai-admission.io/judged-by the class policy writes
CONDITION_NAME = "not-judged-natively"


def records(rules: Rules, settings: ClassSettings) -> bool:
    """The class's policy may judge a pod whole: the webhook records profiles, no queueing backend's words are
    due (a backend's pod writes are the webhook's), no pool tolerations (the webhook's covering rules) and no NCCL
    for single-node pods of the class."""
    plan = settings.mutate
    return (rules.mutation.record_profile and not rules.scheduler.active and not plan.tolerations
            and not (plan.nccl and plan.nccl_single_node))


def _plain_gpus() -> str:
    """Each app container's request of the resource (``variables.asked[0]``) is a whole number, equal to its
    limit where both are given (`profile._plain_count`; else the webhook parses, and may refuse)."""
    text = "string({0}[variables.asked[0]])"
    each = "(!(variables.asked[0] in {0}) || " + text + ".matches('^[0-9]{{1,4}}$'))"
    limits, requests = "c.?resources.?limits.orValue({})", "c.?resources.?requests.orValue({})"
    return ("object.spec.containers.all(c, cel.bind(li, " + limits + ", cel.bind(rq, " + requests + ", "
            + each.format("li") + " && " + each.format("rq") + " && (!(variables.asked[0] in li) || "
            "!(variables.asked[0] in rq) || " + text.format("li") + " == " + text.format("rq") + "))))")


def _model_by_label_only(rules: Rules) -> str:
    """The model is named by one model label of the nodeSelector and by nothing else the webhook reads."""
    selector = "object.spec.?nodeSelector.orValue({})"
    others = [*rules.instance_type_keys, *([rules.gpu_name_labels.name_key] if rules.gpu_name_labels else [])]
    clauses = [f"{cel_list(rules.model_keys)}.filter(k, sl[?k].orValue('') != '').size() == 1",
               "size(object.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
               ".?nodeSelectorTerms.orValue([])) == 0"]
    if others:
        clauses.append(f"!{cel_list(others)}.exists(k, k in sl)")
    return f"cel.bind(sl, {selector}, {' && '.join(clauses)})"


def _annotations(rules: Rules) -> str:
    """No annotation the webhook reads but the record's own: no other hint of ours, no other scheduler's model
    annotation, and a gpu-memory written in whole MiB, GiB or TiB (device annotations: `plainly_clear`)."""
    foreign = [*rules.model_annotations, *rules.node_selector_annotations]
    keys = (f"an.all(k, !k.startsWith({cel_string(names.PREFIX)}) || k in {cel_list(OWN_ANNOTATIONS)})"
            + (f" && !{cel_list(sorted(foreign))}.exists(k, k in an)" if foreign else ""))
    return (f"cel.bind(an, object.metadata.?annotations.orValue({{}}), {keys} && "
            f"an[?{cel_string(names.GPU_MEMORY)}].orValue('').matches({cel_string(MEMORY)}))")


def _memory_bytes() -> str:
    """The annotation's bytes per GPU (it matches `MEMORY`)."""
    units = "{" + ", ".join(f"'{suffix}': {amount}" for suffix, amount in UNITS.items()) + "}"
    return (f"cel.bind(gm, object.metadata.annotations[{cel_string(names.GPU_MEMORY)}], "
            f"int(gm.substring(0, size(gm) - 2)) * {units}[gm.substring(size(gm) - 2)])")


def _guaranteed() -> str:
    """`validate._qos_finding`: cpu and memory limits on every container, requests (if any) written alike."""
    each = ("['cpu', 'memory'].all(r, r in c.?resources.?limits.orValue({}) && "
            "(!(r in c.?resources.?requests.orValue({})) || "
            "string(c.resources.requests[r]) == string(c.resources.limits[r])))")
    return pod_containers(each)


def _memory_limited() -> str:
    """A memory limit the ``/dev/shm`` size is taken from (`mutate._pod_memory_limit`; else the webhook warns), and
    memory for every container (`validate._host_memory_findings`)."""
    limited = "'memory' in c.?resources.?limits.orValue({})"
    return (f"(has(object.spec.resources) && 'memory' in object.spec.resources.?limits.orValue({{}}) || "
            f"{pod_containers(limited)}) && {pod_containers(limited)}")


def decided(rules: Rules, workload: str, settings: ClassSettings) -> str:
    """``variables.decided``: the webhook would add nothing to what the class policy writes, and find nothing."""
    return " && ".join(f"({c})" for c in clauses(rules, workload, settings))


def clauses(rules: Rules, workload: str, settings: ClassSettings) -> list[str]:
    """The clauses of `decided`, in the order they are tested (the cheap and the usual first)."""
    plan = settings.mutate
    card = "variables.card"
    clauses = [
        "variables.countable && variables.synced && variables.model != '?' && variables.model != ''",
        f"!({cel_string(names.GPU_MODEL)} in object.metadata.?annotations.orValue({{}}))",
        _model_by_label_only(rules),
        f"size({card}) == 4",
        _annotations(rules),
        "size(variables.asked) == 1 && variables.initGpus.all(g, g == 0) && variables.gpus >= 1",
        f"variables.gpus <= int({card}[1])",
        _plain_gpus(),
        f"{_vendors(rules)}[?variables.asked[0]].orValue('') == {card}[2]",
        f"{_memory_bytes()} <= int({card}[0])",
        "variables.multiNode == 0",
        "object.spec.?priorityClassName.orValue('') == ''",
        _memory_limited(),
        plainly_clear(rules),
    ]
    if rules.mig_pattern is not None:
        clauses.append(f"!variables.asked[0].matches({cel_string(rules.mig_pattern.pattern)})")
    if rules.warn_tensor_parallel_over_pcie:
        clauses.append(f"(variables.gpus <= 1 || {card}[3] != 'pcie')")
    if settings.warn_guaranteed_qos:
        clauses.append(_guaranteed())
    if plan.shm is not None:
        clauses.append("!variables.shmTaken")
    bypasses = rules.bypasses
    if bypasses.visible_devices_env and bypasses.voids(workload):
        # `mutate.void_visible_devices`: every container that asks for no GPU, init containers too, gets the
        # variable from the webhook
        clauses.append("variables.appGpus.all(g, g > 0) && size(variables.initGpus) == 0")
    if plan.topology_spread is not None:
        keys = cel_list(plan.topology_spread.topology_keys)
        present = "object.spec.?topologySpreadConstraints.orValue([]).map(t, t.topologyKey)"
        clauses.append(f"size(variables.appLabel) == 2 && "
                       f"cel.bind(pk, {present}, {keys}.filter(k, !(k in pk)).size() == size(variables.spreadKeys))")
    return clauses


def _vendors(rules: Rules) -> str:
    """Each listed GPU resource's vendor (`Rules.vendor_of`)."""
    found = {r: v for r in sorted(rules.gpu_resources) if (v := rules.vendor_of(r))}
    return "{" + ", ".join(f"{cel_string(r)}: {cel_string(v)}" for r, v in found.items()) + "}"


def record(workload: str, settings: ClassSettings) -> str:
    """`mutate._summary_text` of a pod judged here, its keys sorted as the webhook's: the class, the memory per
    GPU, the GPUs, the model, one pod, the class's preemptibility, the reason (the annotation)."""
    preemptible = "true" if settings.preemptible else "false"
    parts = [cel_string(f'{{"class":"{workload}","gpuMemoryPerGpu":"'), byte_quantity("mb"),
             cel_string('","gpus":{"'), "variables.asked[0]", cel_string('":'), "string(variables.gpus)",
             cel_string('},"model":"'), "variables.model",
             cel_string(f'","multiNode":false,"preemptible":{preemptible},"reason":"{annotated_reason(workload)}"}}')]
    return f"variables.decided ? cel.bind(mb, {_memory_bytes()}, {' + '.join(parts)}) : ''"


def variables(rules: Rules, workload: str, settings: ClassSettings) -> list[dict[str, str]]:
    """``card`` (the facts of a model a node has: memory, GPUs per node, vendor, interconnect), ``gpus``, ``decided``,
    ``record``; the class policy's own variables come first (`webhook.generate.native._variables`)."""
    card = (f"variables.model != '?' && variables.model != '' ? "
            f"variables.facts[?({cel_string(CARD)} + variables.model)].orValue('').split('|') : []")
    found = [{"name": "card", "expression": card},
             {"name": "gpus", "expression": "variables.appGpus.sum()"},
             {"name": "decided", "expression": decided(rules, workload, settings)},
             {"name": "record", "expression": record(workload, settings)}]
    return [{**v, "expression": without_bind(v["expression"])} for v in found]


def record_entries() -> list[tuple[str, str, str]]:
    """The record and the mark of the judgement, as (annotation, condition, value) of the class policy's writes."""
    return [(names.PROFILE, "variables.record != ''", "variables.record"),
            (names.JUDGED_BY, "variables.record != ''", cel_string(JUDGE))]


def forged_patch() -> str:
    """A mark the pod came with, removed where the policy does not judge the pod: it never keeps a pod from the
    webhooks while the policy runs."""
    path = pointer(("metadata", "annotations", names.JUDGED_BY))
    return (f"{cel_string(names.JUDGED_BY)} in object.metadata.?annotations.orValue({{}}) && variables.record == '' ? "
            f"[JSONPatch{{op: 'remove', path: {cel_string(path)}}}] : []")


def webhook_condition(priority_classes: Mapping[str, str]) -> dict[str, str]:
    """The webhooks' ``matchConditions`` entry the native component adds: a pod created with a native class and the
    mark of a judgement was judged whole by its class policy (which runs before every webhook, and removes a mark it
    did not write), so neither webhook is called for it. A mark, not the record: the mutating webhook writes the
    record of every pod it profiles, and the validating webhooks must still judge those.

    ``priority_classes``: each judging class's PriorityClass. Where the policy did not run (its parameter not there,
    or an error it was told to ignore), a mark written by hand would skip the webhooks; the backstop still holds the
    pod to a model, a memory and no bypass, and this condition to what else the webhook would deny of someone else's
    business: the PriorityClass the policy writes (a pod judged whole named none), and no resource claims."""
    notes = "object.metadata.?annotations.orValue({})"
    chosen = "{" + ", ".join(f"{cel_string(w)}: {cel_string(p)}" for w, p in sorted(priority_classes.items())) + "}"
    judged = (f"request.resource.resource == 'pods' && request.operation == 'CREATE' && "
              f"(!has(request.subResource) || request.subResource == '') && "
              f"{notes}[?{cel_string(names.JUDGED_BY)}].orValue('') == {cel_string(JUDGE)} && "
              f"{chosen}[?{notes}[?{cel_string(names.WORKLOAD_TYPE)}].orValue('')].orValue('-') == "
              f"object.spec.?priorityClassName.orValue('') && "
              f"size(object.spec.?resourceClaims.orValue([])) == 0")
    return {"name": CONDITION_NAME, "expression": f"!({judged})"}
