"""The common GPU pod admitted with no webhook: every class's mutations in one MutatingAdmissionPolicy, generated
from the rules, beside the backstop's validation (`webhook.generate.backstop`).

Every admission webhook is a network hop on the pod-creation path and a component that can be down. Kubernetes
1.36 runs MutatingAdmissionPolicies (``admissionregistration.k8s.io/v1``) inside the API server, in CEL. This module
writes one, `POLICY`, for a pod that names its class by annotation (``ai-admission.io/workload-type``, the first
thing the webhook reads) and asks for its GPUs in a way CEL can count: what `webhook.core.mutate` gives such a pod
from its class's settings, and nothing the webhook would not give it. Each class's settings are CEL maps keyed by
the class (``variables.cls``), and its writes are branches of one JSON Patch: one policy is dispatched for a pod,
not one per class (each policy the API server dispatches costs a pod a conversion of itself and a match, measured
in docs/contributors/benchmarks.md).

What the policy writes, each where the pod lacks it (the step of `webhook.core.mutate` it stands for beside it):

- the GPU tolerations (`add_tolerations`): of the GPU taints the pod's nodes carry, from the nodes' facts the
  server writes (`webhook.generate.native_placement`), else, while no node is known, of each accelerator it asks for;
- placement (`add_topology`): a multi-node job packed into the narrowest topology level that holds it, replicas
  spread over the keys their nodes have two values of, from the same facts;
- the memory-backed ``/dev/shm`` volume and its mounts in the GPU containers, sized per GPU up to the class
  maximum and at most the rules' fraction of the pod's memory limit (`add_shm`, `_shm_size`);
- the class's PriorityClass with its value and preemption policy, when the pod names none and the cluster has the
  class as the rules say (`set_priority`; the facts say, and where the cluster's class differs, only its name);
- the class label the webhook records, the class's own labels and annotations, and its run-time bound
  (`record_profile`, `add_metadata`, `add_deadline`);
- where the pod is judged whole (`webhook.generate.native_record`, from the ledger: the webhook would add nothing
  more and find nothing), the profile record and the mark that keeps the webhooks from being called.

The values are plain maps, never typed objects (a typed list in a JSON Patch value made a v1.36 API server panic).
A pod of no class that may ask for GPUs gets its GPU tolerations from the same policy: one policy for every pod.
Before the server has first written the facts' object no pod is given anything by it (a policy whose parameter
is not there is not run); from then on, with no node known yet, each accelerator's toleration, as the webhook
gives it with no node watch.

What stays the webhook's, and why: the profile record of a pod not judged whole; NCCL settings; placement and
tolerations of a pod whose model or job size CEL cannot read as the webhook does; a class's pool tolerations; a
pod whose class comes from signals or shape, not the annotation; and a pod whose GPUs CEL cannot count as the
webhook does (claims, shares by memory or annotation). Such a pod gets nothing from this policy (every write is
guarded by ``variables.countable``) and everything from the webhook, which runs after it and adds only what is
still missing. docs/admins/native.md says which path goes where.
"""

from __future__ import annotations

from typing import Any, Mapping

from webhook.core import names
from webhook.core.quantity import BINARY_UNITS
from webhook.core.rules import ClassSettings, Rules
from webhook.core.view import cluster_facts
from webhook.core.view.cluster_facts import NAME as FACTS

from . import native_record
from .backstop import manifests as backstop_manifests
from .backstop import toleration_policy
from .cel import resources
from .cel.memory import byte_quantity
from .cel.resources import APP, INIT, asks_for_accelerator
from .cel.text import add, cel_list, cel_string, plain_map, unbound
from .cel.tolerations import TOLERATIONS_PATCH
from .cel.tolerations import toleration_variables as general_tolerations
from .native_placement import fact_variables, job_variables, placement_patches, placement_variables, places
from .native_placement import toleration_variables as facts_tolerations
from .webhooks import NAME as NAMESPACE
from .webhooks import POD_GROUP_WEBHOOK, excluded_namespaces, webhook_configurations

PREFIX = "ai-admission-native"
POLICY = PREFIX  # the one mutating policy of the classes
LABELS = {"app.kubernetes.io/name": "ai-admission", "app.kubernetes.io/component": "native"}
SHM_PATH = "/dev/shm"
MIB = BINARY_UNITS["Mi"]
TOLERATIONS = f"{PREFIX}-tolerations"


# -- which classes the policy writes for ----------------------------------------------------------------------

def writes_anything(rules: Rules, settings: ClassSettings) -> bool:
    """The class has a write the policy makes: /dev/shm, a PriorityClass, labels, annotations, a run-time bound,
    placement, or the record."""
    plan = settings.mutate
    return bool(plan.shm is not None or settings.priority_class is not None or plan.labels or plan.annotations
                or plan.active_deadline_seconds is not None or plan.pod_affinity is not None
                or plan.topology_spread is not None or rules.mutation.record_profile)


def native_classes(rules: Rules) -> dict[str, ClassSettings]:
    """The classes the policy takes: every class with a write of its own."""
    return {w: s for w, s in rules.classes.items() if writes_anything(rules, s)}


def judging_classes(rules: Rules) -> list[str]:
    """The classes whose pods the policy judges whole (`native_record`): the webhooks leave those pods out."""
    return sorted(native_record.judging(rules, native_classes(rules)))


def _reads_facts(rules: Rules, classes: Mapping[str, ClassSettings]) -> bool:
    """The policy reads the nodes' facts: to place pods, to tolerate their nodes' GPU taints, to write a
    PriorityClass as the cluster has it, or to judge a pod whole."""
    return bool(places(classes) or rules.mutation.gpu_tolerations or native_record.judging(rules, classes)
                or any(s.priority_class is not None for s in classes.values()))


# -- per-class constants as CEL maps ----------------------------------------------------------------------------

def per_class(classes: Mapping[str, ClassSettings], value: Any) -> str:
    """``{class: value(settings)}`` for the classes where ``value`` gives one (a CEL expression), read for the
    pod's class: ``[]`` where its class has none."""
    entries = [(w, value(s)) for w, s in sorted(classes.items())]
    found = "{" + ", ".join(f"{cel_string(w)}: dyn({v})" for w, v in entries if v is not None) + "}"
    return f"{found}[?variables.cls].orValue([])"


def _shm(settings: ClassSettings) -> str | None:
    shm = settings.mutate.shm
    return None if shm is None else f"[{float(shm.per_gpu)}, {float(shm.max)}, {float(shm.without_memory_limit)}]"


def _priority(settings: ClassSettings) -> str | None:
    p = settings.priority_class
    return None if p is None else f"[dyn({cel_string(p.name)}), dyn({p.value}), dyn({cel_string(p.preemption_policy)})]"


def _pairs(entries: Mapping[str, str]) -> str:
    return "[" + ", ".join(f"[{cel_string(k)}, {cel_string(v)}]" for k, v in entries.items()) + "]"


# -- the variables -----------------------------------------------------------------------------------------------

def _variables(rules: Rules, classes: Mapping[str, ClassSettings]) -> list[dict[str, str]]:
    share_notes = sorted({key for share in rules.accelerators.share_annotations for key in share.keys()})
    no_share_notes = (f" && !{cel_list(share_notes)}.exists(k, k in object.metadata.?annotations.orValue({{}}))"
                      if share_notes else "")
    variables = [
        {"name": "cls", "expression": f"object.metadata.?annotations[?{cel_string(names.WORKLOAD_TYPE)}].orValue('')"},
        {"name": "asks", "expression": resources.counted_asks_of_every(rules)},
        {"name": "counted", "expression": resources.counted_names(rules, "variables.asks")},
        # the pod's accelerators can be counted as the webhook counts them, and are of one resource (the webhook's
        # effective request is per resource; else this policy leaves the pod alone)
        {"name": "countable",
         "expression": f"size(variables.counted) <= 1 && {resources.EVERY}.all(c, {resources.countable(rules, 'c')}) && "
                       f"size(object.spec.?resourceClaims.orValue([])) == 0{no_share_notes}"},
    ]
    judged = native_record.judging(rules, classes)
    if _reads_facts(rules, classes):
        variables += fact_variables(rules)
        variables.append({"name": "priorityState", "expression": native_record.priority_state(classes)})
    if rules.mutation.gpu_tolerations:
        asked, _ = general_tolerations(rules)
        variables += [{"name": "asked",
                       "expression": f"variables.countable ? variables.counted : {asked['expression']}"},
                      *facts_tolerations(classes)]
    elif judged:
        variables.append({"name": "asked",
                          "expression": "variables.countable ? variables.counted : []"})
    shm_classes = any(s.mutate.shm is not None for s in classes.values())
    if shm_classes or places(classes) or judged:
        # each container's GPUs, of the counted resources its asks name (read once, in `asks`)
        variables += [
            {"name": "appGpus", "expression": f"lists.range(size({APP})).map(i, "
                                              f"{resources.amounts(f'{APP}[i]', 'variables.asks[i]')})"},
            {"name": "initGpus", "expression": f"lists.range(size({INIT})).map(i, "
                                               f"{resources.amounts(f'{INIT}[i]', f'variables.asks[size({APP}) + i]')})"},
        ]
    if shm_classes:
        variables += _shm_variables(rules, classes)
    variables += placement_variables(rules, classes)
    if judged:
        if not places(classes):
            variables += job_variables(rules)
        variables += native_record.variables(rules, classes)
    return unbound(variables)


def shm_suffixes(classes: Mapping[str, ClassSettings]) -> tuple[str, ...]:
    """The binary suffixes a /dev/shm size can take: no larger than the largest class maximum (a size is never
    more)."""
    largest = max((s.mutate.shm.max for s in classes.values() if s.mutate.shm is not None), default=0)
    return tuple(suffix for suffix, unit in BINARY_UNITS.items() if unit <= largest)


def _shm_variables(rules: Rules, classes: Mapping[str, ClassSettings]) -> list[dict[str, str]]:
    """The /dev/shm size of `webhook.core.mutate._shm_size` and the containers that get the mount."""
    volume = rules.mutation.shm_volume_name
    mounts_shm = (f"c.?volumeMounts.orValue([]).exists(m, m.?mountPath.orValue('') == '{SHM_PATH}' || "
                  f"m.?mountPath.orValue('') == '{SHM_PATH}/')")
    every_app = "true" if rules.mutation.shm_in_all_containers else "variables.appGpus[i] > 0"
    sidecar = "c.?restartPolicy.orValue('') == 'Always'"
    init = INIT
    # the effective request: app containers and sidecars together, against the largest regular init container
    # (most pods have no init container: their effective request is the app containers')
    app_gpus = (f"size({init}) == 0 ? variables.appGpus.sum() : variables.appGpus.sum() + lists.range(size({init}))"
                f".filter(i, cel.bind(c, {init}[i], {sidecar})).map(i, variables.initGpus[i]).sum()")
    init_gpus = (f"size({init}) == 0 ? 0 : cel.bind(iv, lists.range(size({init})).filter(i, cel.bind(c, {init}[i], "
                 f"!({sidecar}))).map(i, variables.initGpus[i]), size(iv) == 0 ? 0 : iv.max())")
    memory = "object.spec.?resources.?limits.?memory"
    every = f"({APP} + {init}.filter(c, {sidecar}))"
    containers_memory = (f"cel.bind(ms, {every}.map(c, string(c.?resources.?limits.?memory.orValue(''))), "
                         f"ms.all(m, isQuantity(m)) ? ms.map(m, quantity(m).asApproximateFloat()).sum() : -1.0)")
    limit = (f"{memory}.hasValue() && isQuantity(string({memory}.value())) ? "
             f"quantity(string({memory}.value())).asApproximateFloat() : {containers_memory}")
    fraction = float(rules.mutation.max_shm_fraction_of_memory_limit)
    size = (f"cel.bind(lim, variables.shmLimit, cel.bind(ga, {app_gpus}, cel.bind(gi, {init_gpus}, "
            f"cel.bind(g, ga > gi ? ga : gi, "
            f"[double(variables.shm[0]) * double(g > 1 ? g : 1), double(variables.shm[1]), double(lim) * {fraction}].min()))))")
    whole = f"cel.bind(sz, {size}, sz >= {float(MIB)} ? int(sz / {float(MIB)}) * {MIB} : int(sz))"
    return [
        {"name": "shm", "expression": per_class(classes, _shm)},
        {"name": "shmTargets",
         "expression": f"lists.range(size({APP})).filter(i, cel.bind(c, {APP}[i], ({every_app}) && !{mounts_shm}))"},
        {"name": "shmInit",
         "expression": f"lists.range(size({init})).filter(i, cel.bind(c, {init}[i], variables.initGpus[i] > 0 && "
                       f"!{mounts_shm}))"},
        {"name": "shmTaken", "expression": f"object.spec.?volumes.orValue([]).exists(v, v.name == '{volume}')"},
        # the pod's memory limit (-1: none; the webhook then sizes /dev/shm by the class's default and says so, which
        # it would not if the volume were there already: such a pod's /dev/shm is the webhook's)
        {"name": "shmLimit", "expression": limit},
        {"name": "shmSize", "expression": f"size(variables.shm) == 3 && variables.shmLimit >= 0.0 ? "
                                          f"cel.bind(b, {whole}, {byte_quantity('b', shm_suffixes(classes))}) : ''"},
    ]


# -- the writes --------------------------------------------------------------------------------------------------

def _metadata_ops(kind: str, pairs: str, replacing: str = "[]") -> str:
    """``add`` operations of ``pairs`` (a CEL list of [key, value]) to the pod's labels or annotations, each where
    the pod has none of that key, and of ``replacing`` whatever the pod has; the map first where the pod has none."""
    present = f"object.metadata.?{kind}.orValue({{}})"
    at = cel_string(f'/metadata/{kind}/') + " + jsonpatch.escapeKey(p[0])"
    each = f"wanted.filter(p, !(p[0] in {present})).map(p, {add(at, 'p[1]')}) + replaced.map(p, {add(at, 'p[1]')})"
    first = (f"!has(object.metadata.{kind}) && size(wanted) + size(replaced) > 0 ? "
             f"[{add(cel_string(f'/metadata/{kind}'), '{}')}] : []")
    return f"cel.bind(wanted, {pairs}, cel.bind(replaced, {replacing}, ({first}) + {each}))"


def _shm_ops(rules: Rules) -> str:
    """The memory-backed volume, and its mount in each target container (`variables.shmTargets`, `shmInit`: their
    indices), where the pod has neither."""
    name = rules.mutation.shm_volume_name
    volume = plain_map(name=cel_string(name), emptyDir="{'medium': 'Memory', 'sizeLimit': variables.shmSize}")
    mount = plain_map(name=cel_string(name), mountPath=cel_string(SHM_PATH))

    def mounts(kind: str, targets: str) -> str:
        at = f"'/spec/{kind}/' + string(i) + '/volumeMounts'"
        return (f"{targets}.map(i, has(object.spec.{kind}[i].volumeMounts) ? {add(at + ' + ' + cel_string('/-'), mount)}"
                f" : {add(at, f'[{mount}]')})")

    wanted = ("variables.countable && size(variables.shm) == 3 && !variables.shmTaken && variables.shmLimit >= 0.0 && "
              "size(variables.shmTargets) + size(variables.shmInit) > 0")
    return (f"{wanted} ? [has(object.spec.volumes) ? {add(cel_string('/spec/volumes/-'), volume)} : "
            f"{add(cel_string('/spec/volumes'), f'[{volume}]')}] + {mounts('initContainers', 'variables.shmInit')} + "
            f"{mounts('containers', 'variables.shmTargets')} : []")


def _priority_ops(classes: Mapping[str, ClassSettings]) -> str:
    """The class's PriorityClass with its value and preemption policy (the Priority admission plugin has already
    resolved the pod's: an add replaces them), where the pod names none and the cluster has the class as the rules
    say (the facts' PriorityClasses: `webhook.generate.native_record.priority_state`). Where it lacks the class or
    holds it with another value, the webhook sets what it sets and says why: the policy writes nothing; nor for a pod
that answers "can it be preempted?" by annotation (its answer may choose another class's PriorityClass)."""
    chosen = per_class(classes, _priority)
    # a pod that answers "can it be preempted?" itself may be owed another class's PriorityClass: the webhook's
    answered = f"!({cel_string(names.PREEMPTIBLE)} in object.metadata.?annotations.orValue({{}}))"
    named = ("variables.countable && object.spec.?priorityClassName.orValue('') == '' && size(pc) == 3 && "
             f"variables.priorityState == 'as-rules' && {answered}")
    full = (f"[{add(cel_string('/spec/priorityClassName'), 'pc[0]')}, {add(cel_string('/spec/priority'), 'pc[1]')}, "
            f"{add(cel_string('/spec/preemptionPolicy'), 'pc[2]')}]")
    return f"cel.bind(pc, {chosen}, {named} ? {full} : [])"


def _mutations(rules: Rules, classes: Mapping[str, ClassSettings]) -> list[dict[str, Any]]:
    """One JSON Patch with every write, each where the pod lacks it: the GPU tolerations, placement, ``/dev/shm``,
    the priority, the run-time bound, the labels and annotations (the record and its mark where the pod is judged
    whole), and the removal of a mark the policy did not write.

    One mutation, not one per kind of write: each mutation costs the API server an activation (the pod converted
    for CEL), an encoding of the pod, a strict decoding and defaulting, and evaluates its variables afresh against
    the pod the mutations before it left (the judgement must see the pod as sent)."""
    ops: list[str] = []
    if rules.mutation.gpu_tolerations:
        ops.append(TOLERATIONS_PATCH)
    ops += placement_patches(classes)
    if any(s.mutate.shm is not None for s in classes.values()):
        ops.append(_shm_ops(rules))
    if any(s.priority_class is not None for s in classes.values()):
        ops.append(_priority_ops(classes))
    deadlines = {w: s.mutate.active_deadline_seconds for w, s in classes.items()
                 if s.mutate.active_deadline_seconds is not None}
    if deadlines:
        ops.append(f"cel.bind(ds, {per_class(classes, lambda s: s.mutate.active_deadline_seconds)}, "
                   f"variables.countable && type(ds) == int && !has(object.spec.activeDeadlineSeconds) ? "
                   f"[{add(cel_string('/spec/activeDeadlineSeconds'), 'ds')}] : [])")
    judged = native_record.judging(rules, classes)

    def labels(s: ClassSettings) -> str:
        return _pairs(dict(s.mutate.labels))

    label_pairs = per_class(classes, labels)
    if rules.mutation.record_profile:
        label_pairs = f"[[dyn({cel_string(names.WORKLOAD_TYPE)}), dyn(variables.cls)]] + {label_pairs}"
    ops.append(_metadata_ops("labels", f"variables.countable && variables.cls in {cel_list(classes)} ? "
                                       f"{label_pairs} : []"))
    notes = f"(variables.countable ? {per_class(classes, lambda s: _pairs(dict(s.mutate.annotations)))} : [])"
    if judged:
        # the record and the mark replace what the pod was sent with, as the webhook replaces a record
        record = (f"(variables.record != '' ? [[dyn({cel_string(names.PROFILE)}), dyn(variables.record)], "
                  f"[dyn({cel_string(names.JUDGED_BY)}), dyn({cel_string(native_record.JUDGE)})]] : [])")
        ops.append(_metadata_ops("annotations", notes, replacing=record))
    else:
        ops.append(_metadata_ops("annotations", notes))
    if judged:
        ops.append(native_record.forged_patch())
    expression = " + ".join(f"({op})" for op in ops)
    return [{"patchType": "JSONPatch", "jsonPatch": {"expression": unbound([{"expression": expression}])[0]["expression"]}}]


def class_policy(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy of the classes and its binding; empty when no class writes anything."""
    classes = native_classes(rules)
    if not classes:
        return []
    policy: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": LABELS},
        "spec": {
            # a convenience, like the webhook's own failurePolicy: an error admits the pod as it came
            "failurePolicy": "Ignore",
            # what it writes no later mutation removes, and it reads nothing another one adds
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}],
                                 "matchPolicy": "Equivalent"},
            # the pods it writes for: those of a class, and those that may ask for GPUs (their tolerations)
            "matchConditions": [{"name": "names-a-native-class-or-asks-for-accelerators",
                                 "expression": f"object.metadata.?annotations[?{cel_string(names.WORKLOAD_TYPE)}]"
                                               f".orValue('') in {cel_list(classes)}"
                                               + (f" || {asks_for_accelerator(rules)}" if rules.mutation.gpu_tolerations
                                                  else "")}],
            "variables": _variables(rules, classes),
            "mutations": _mutations(rules, classes),
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": LABELS},
        "spec": {"policyName": POLICY, "matchResources": {"namespaceSelector": {
            "matchExpressions": [excluded_namespaces(), *(namespace_expressions or [])]}}}}
    if _reads_facts(rules, classes):
        # the nodes' facts the server writes (`webhook.core.view.cluster_facts`); a policy whose parameter is not
        # there (yet) is not run at all (parameterNotFoundAction), and the webhook then does all of it
        policy["spec"]["paramKind"] = {"apiVersion": f"{cluster_facts.GROUP}/{cluster_facts.VERSION}",
                                       "kind": cluster_facts.KIND}
        binding["spec"]["paramRef"] = {"name": FACTS, "namespace": NAMESPACE, "parameterNotFoundAction": "Allow"}
    return [policy, binding]


def policies(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """`ai-admission manifests native`: the one mutating policy, and the kind of its parameter (the server creates
    the object and writes the nodes' facts to it). It gives every pod that may ask for GPUs its GPU tolerations, as
    the webhook does, from the facts: one policy per pod. Where no class writes anything, the GPU toleration
    policy of the backstop-tolerations component instead (`webhook.generate.backstop.toleration_policy`)."""
    found = class_policy(rules, namespace_expressions)
    if not found:
        return toleration_policy(rules, namespace_expressions, name=TOLERATIONS)
    facts = [cluster_facts.crd()] if _reads_facts(rules, native_classes(rules)) else []
    return [*facts, *found]


def _priority_class(rules: Rules, workload: str) -> str:
    """The PriorityClass the policy writes for a class ('' where it writes none: a pod then names none)."""
    priority = rules.classes[workload].priority_class
    return priority.name if priority is not None else ""


def webhook_patch(rules: Rules) -> list[dict[str, Any]]:
    """The native component's patch of the webhooks (`webhook.generate.webhooks`): each entry's matchConditions,
    led by the condition that leaves out a pod the policy judged whole (`native_record.webhook_condition`).

    First, and joined to the entry's own condition: the API server evaluates every condition of an entry, so the
    pod judged whole would pay for the long one too; in one expression ``&&`` stops at the first false. Whole
    lists, written from the same rules: a strategic merge replaces a matchConditions list."""
    classes = judging_classes(rules)
    if not classes:
        return []
    judged = native_record.judged_natively({w: _priority_class(rules, w) for w in classes})
    patch = []
    for configuration in webhook_configurations(rules):
        entries = []
        for w in configuration["webhooks"]:
            if w["name"] == POD_GROUP_WEBHOOK:
                continue  # not a pod's: the policy judges pods
            own = w.get("matchConditions", [])
            if own:
                (first, *rest) = own
                conditions = [{"name": first["name"], "expression": f"!({judged})\n&& ({first['expression']})"},
                              *rest]
            else:
                conditions = [native_record.webhook_condition({c: _priority_class(rules, c) for c in classes})]
            entries.append({"name": w["name"], "matchConditions": conditions})
        patch.append({"apiVersion": configuration["apiVersion"], "kind": configuration["kind"],
                      "metadata": {"name": configuration["metadata"]["name"]}, "webhooks": entries})
    return patch


def native_set(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The whole set, as manifests/overlays/native installs it: `policies` and the backstop's validation."""
    return [*policies(rules, namespace_expressions), *backstop_manifests(rules, namespace_expressions)]
