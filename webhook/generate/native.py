"""The common GPU pod admitted with no webhook: each class's mutations as a MutatingAdmissionPolicy, generated from
the rules, beside the backstop's validation (`webhook.generate.backstop`).

Every admission webhook is a network hop on the pod-creation path and a component that can be down. Kubernetes
1.36 runs MutatingAdmissionPolicies (``admissionregistration.k8s.io/v1``) inside the API server, in CEL. This module
writes one per workload class, for a pod that names its class by annotation (``ai-admission.io/workload-type``,
the first thing the webhook reads) and asks for its GPUs in a way CEL can count: what `webhook.core.mutate` gives
such a pod from the class's settings, and nothing the webhook would not give it.

What a class's policy writes, each mirroring the step of `webhook.core.mutate` named beside it:

- the memory-backed ``/dev/shm`` volume and its mounts in the GPU containers, sized per GPU up to the class
  maximum and at most the rules' fraction of the pod's memory limit (`add_shm`, `_shm_size`);
- the class's PriorityClass with its value and preemption policy, all three, when the pod names none
  (`set_priority`: the Priority admission plugin has already run, and refuses a pod whose value disagrees);
- the class label the webhook records, the class's own labels and annotations, and its run-time bound
  (`record_profile`, `add_metadata`, `add_deadline`); each only where the pod has none;
- the GPU tolerations (`add_tolerations`): of the GPU taints the pod's nodes carry, from the nodes' facts the
  server writes (`native_placement`), else, while no node is known, of each accelerator the pod asks for;
- placement (`add_topology`): a multi-node job packed into the narrowest topology level that holds it, replicas
  spread over the keys their nodes have two values of, from the same facts (`native_placement`).

A class policy writes in one JSON Patch (`_mutations`): each write where the pod lacks it, with plain maps as
values, never typed objects (one typed list in a JSON Patch value made a v1.36 API server panic on every pod create,
in cel-go's ``ConvertToNative``). One mutation, not an apply configuration beside it: each mutation costs the API
server a conversion of the pod and back, and an apply configuration a structured merge with the pod's schema on top.
A pod a class policy takes gets its GPU tolerations there; the toleration policy of the set (`TOLERATIONS`) takes
every other pod, so no pod pays for two policies. Where a pod is judged whole (`native_record`: the webhook would
add nothing more and find nothing), the policy also writes the profile record, and the webhooks are not called.

What stays the webhook's, and why: the profile record of a pod not judged whole; NCCL settings (the fabric of
the pod's own requests and attachments, and the warnings when a fabric needs what the pod lacks); placement and
tolerations of a pod whose model or job size CEL cannot read as the webhook does; a class's pool tolerations; a
pod whose class comes from signals or shape, not the annotation; and a pod whose GPUs CEL cannot count as the
webhook does (claims, shares by memory or annotation). Such a pod gets nothing from these policies (every write
is guarded by ``variables.countable``) and everything from the webhook, which runs after them and adds only what
is still missing (it never overwrites what a policy set, as it never overwrites the user). docs/admins/native.md
says which path goes where.
"""

from __future__ import annotations

from typing import Any

from webhook.core import names
from webhook.core.patch import pointer
from webhook.core.quantity import BINARY_UNITS
from webhook.core.rules import ClassSettings, Rules
from webhook.core.view import cluster_facts
from webhook.core.view.cluster_facts import NAME as FACTS

from . import native_record
from .backstop import (
    TOLERATIONS_PATCH,
    Rule,
    asked_names,
    byte_quantity,
    quantity_text,
    toleration_policy,
    toleration_variables,
    with_limits_and_requests,
    without_bind,
)
from .backstop import manifests as backstop_manifests
from .match_conditions import cel_list, cel_string
from .native_placement import (
    fact_variables,
    job_variables,
    placement_patches,
    placement_variables,
    places,
    plain_map,
)
from .native_placement import toleration_variables as facts_tolerations
from .webhooks import NAME as NAMESPACE
from .webhooks import excluded_namespaces, webhook_configurations

PREFIX = "ai-admission-native"
LABELS = {"app.kubernetes.io/name": "ai-admission", "app.kubernetes.io/component": "native"}
SHM_PATH = "/dev/shm"
MIB = BINARY_UNITS["Mi"]


def policy_name(workload: str) -> str:
    return f"{PREFIX}-{workload}"


# -- CEL pieces -----------------------------------------------------------------------------------------------------

def _counted_asks(rules: Rules, container: str) -> str:
    """The counted resources (`_counted`) ``container`` asks for, as `Rule.asked` finds the accelerators."""
    return with_limits_and_requests(f"{container}.?resources.orValue({{}})", asked_names(_counted(rules)))


def _gpus(rules: Rules, container: str) -> str:
    """The GPUs ``container`` asks for, in a pod whose accelerators are all counted (``variables.countable``): the
    limit, else the request, of each, summed."""
    amounts = (f"({asked_names(_counted(rules))})"
               f".map(n, quantity({quantity_text('n in li ? li[n] : rq[n]')}).asInteger())")
    return with_limits_and_requests(f"{container}.?resources.orValue({{}})",
                                    f"cel.bind(sv, {amounts}, size(sv) == 0 ? 0 : sv.sum())")


def _counted_names(rules: Rules) -> str:
    """The accelerators the pod's containers ask for, each once, in a countable pod: only the counted names need
    testing, so the long accelerator test of the toleration policy's ``asked`` runs only for the other pods."""
    every = "object.spec.containers + object.spec.?initContainers.orValue([])"
    return (f"[dyn(({every}).map(c, {_counted_asks(rules, 'c')}.join(',')).join(',').split(','))]"
            f".map(all, all.transformList(i, n, n != '' && all.indexOf(n) == i, n))[0]")


def _countable(rules: Rules, rule: Rule, container: str) -> str:
    """Every accelerator ``container`` names is one the webhook counts in devices (`_counted`). The usual names
    are let through first, so the long accelerator test runs only for the rest."""
    plain = "(n in ['cpu', 'memory', 'ephemeral-storage'] || n.startsWith('hugepages-'))"
    each = f"{plain} || {_counted(rules)} || !{rule.accelerator('n')}"
    return with_limits_and_requests(f"{container}.?resources.orValue({{}})", f"li.all(n, {each}) && rq.all(n, {each})")


def _counted(rules: Rules) -> str:
    """``n`` is a resource the webhook counts in whole devices and CEL can too: a listed GPU resource that is not
    a share of memory, or a MIG slice. Any other accelerator (shares, a device class's, one that only looks like a
    GPU) leaves the pod to the webhook."""
    devices = sorted(r for r in rules.gpu_resources if r not in rules.share_resources)
    tests = [f"n in {cel_list(devices)}"] if devices else []
    if rules.mig_pattern is not None:
        tests.append(f"n.matches({cel_string(rules.mig_pattern.pattern)})")
    return "(" + " || ".join(tests or ["false"]) + ")"


def _share_annotations(rules: Rules) -> list[str]:
    return sorted({key for share in rules.share_annotations for key in share.keys()})


def _variables(rules: Rules, workload: str, settings: ClassSettings) -> list[dict[str, str]]:
    rule = Rule(rules)
    app = "object.spec.containers"
    init = "object.spec.?initContainers.orValue([])"
    shares = _share_annotations(rules)
    no_share_notes = (f" && !{cel_list(shares)}.exists(k, k in object.metadata.?annotations.orValue({{}}))"
                      if shares else "")
    variables = [
        # the pod's accelerators can be counted as the webhook counts them (else this policy leaves it alone)
        {"name": "countable",
         "expression": without_bind(f"({app} + {init}).all(c, {_countable(rules, rule, 'c')}) && "
                                    f"size(object.spec.?resourceClaims.orValue([])) == 0{no_share_notes}")},
    ]
    recording = native_record.records(rules, settings)
    if _reads_facts(rules, settings):
        variables += fact_variables(rules)
    if rules.mutation.gpu_tolerations:
        asked, _ = toleration_variables(rules)
        general = asked["expression"]
        variables += [{"name": "asked",
                       "expression": f"variables.countable ? {without_bind(_counted_names(rules))} : {general}"},
                      *facts_tolerations(rules)]
    elif recording:
        variables.append({"name": "asked", "expression": f"variables.countable ? {without_bind(_counted_names(rules))} : []"})
    shm = settings.mutate.shm
    if shm is not None or places(settings) or recording:
        variables += [
            {"name": "appGpus", "expression": without_bind(f"{app}.map(c, {_gpus(rules, 'c')})")},
            {"name": "initGpus", "expression": without_bind(f"{init}.map(c, {_gpus(rules, 'c')})")},
        ]
    if shm is not None:
        volume = rules.mutation.shm_volume_name
        mounts_shm = (f"c.?volumeMounts.orValue([]).exists(m, m.?mountPath.orValue('') == '{SHM_PATH}' || "
                      f"m.?mountPath.orValue('') == '{SHM_PATH}/')")
        every_app = "true" if rules.mutation.shm_in_all_containers else "variables.appGpus[i] > 0"
        sidecar = "c.?restartPolicy.orValue('') == 'Always'"
        # the effective request: app containers and sidecars together, against the largest regular init container
        app_gpus = (f"cel.bind(av, variables.appGpus + {init}.transformList(i, c, {sidecar}, variables.initGpus[i]), "
                    f"av.sum())")
        init_gpus = (f"cel.bind(iv, {init}.transformList(i, c, !({sidecar}), variables.initGpus[i]), "
                     f"size(iv) == 0 ? 0 : iv.max())")
        memory = "object.spec.?resources.?limits.?memory"
        every = f"({app} + {init}.filter(c, {sidecar}))"
        containers_memory = (f"cel.bind(ms, {every}.map(c, string(c.?resources.?limits.?memory.orValue(''))), "
                             f"ms.all(m, isQuantity(m)) ? ms.map(m, quantity(m).asApproximateFloat()).sum() : -1.0)")
        limit = (f"{memory}.hasValue() && isQuantity(string({memory}.value())) ? "
                 f"quantity(string({memory}.value())).asApproximateFloat() : {containers_memory}")
        fraction = float(rules.mutation.max_shm_fraction_of_memory_limit)
        size = (f"cel.bind(lim, {limit}, cel.bind(ga, {app_gpus}, cel.bind(gi, {init_gpus}, "
                f"cel.bind(g, ga > gi ? ga : gi, lim < 0.0 ? {float(shm.without_memory_limit)} : "
                f"[{float(shm.per_gpu)} * double(g > 1 ? g : 1), {float(shm.max)}, lim * {fraction}].min()))))")
        whole = f"cel.bind(sz, {size}, sz >= {float(MIB)} ? int(sz / {float(MIB)}) * {MIB} : int(sz))"
        variables += [
            {"name": "shmTargets",
             "expression": f"{app}.transformList(i, c, ({every_app}) && !{mounts_shm}, i)"},
            {"name": "shmInit",
             "expression": f"{init}.transformList(i, c, variables.initGpus[i] > 0 && !{mounts_shm}, i)"},
            {"name": "shmTaken", "expression": f"object.spec.?volumes.orValue([]).exists(v, v.name == '{volume}')"},
            {"name": "shmSize", "expression": without_bind(f"cel.bind(b, {whole}, {byte_quantity('b')})")},
        ]
    variables += placement_variables(rules, workload, settings)
    if recording:
        if not places(settings):
            variables += job_variables(rules, workload)
        variables += native_record.variables(rules, workload, settings)
    return variables


def _reads_facts(rules: Rules, settings: ClassSettings) -> bool:
    """The class's policy reads the nodes' facts: to place pods, to tolerate its nodes' GPU taints, or to judge a
    pod whole."""
    return places(settings) or rules.mutation.gpu_tolerations or native_record.records(rules, settings)


def _when(condition: str, value: str) -> str:
    """An optional field or entry: set to ``value`` where ``condition`` holds, else left out."""
    return f"{condition} ? optional.of({value}) : optional.none()"


def _add(path: str, value: str) -> str:
    """A JSON Patch ``add`` of ``value`` at ``path`` (a CEL expression), as CEL writes it."""
    return f"JSONPatch{{op: 'add', path: {path}, value: {value}}}"


def _metadata_ops(kind: str, entries: list[tuple[str, str, str]]) -> str:
    """The ``add`` operations of ``entries`` (key, condition, value) to the pod's labels or annotations: the whole
    map where the pod has none, else one key at a time (an ``add`` of a key the pod has replaces its value)."""
    whole = "{" + ", ".join(f"?{cel_string(k)}: {_when(c, v)}" for k, c, v in entries) + "}"
    each = " + ".join(f"({c} ? [{_add(cel_string(pointer(('metadata', kind, k))), v)}] : [])" for k, c, v in entries)
    return (f"!has(object.metadata.{kind}) ? cel.bind(mm, {whole}, size(mm) == 0 ? [] : "
            f"[{_add(cel_string(pointer(('metadata', kind))), 'mm')}]) : ({each})")


def _shm_ops(rules: Rules) -> str:
    """The memory-backed volume, and its mount in each target container (`variables.shmTargets`, `shmInit`: their
    indices), where the pod has neither: plain maps, never typed objects, in a JSON Patch value."""
    name = rules.mutation.shm_volume_name
    volume = plain_map(name=cel_string(name), emptyDir="{'medium': 'Memory', 'sizeLimit': variables.shmSize}")
    mount = plain_map(name=cel_string(name), mountPath=cel_string(SHM_PATH))

    def mounts(kind: str, targets: str) -> str:
        at = f"'/spec/{kind}/' + string(i) + '/volumeMounts'"
        return (f"{targets}.map(i, has(object.spec.{kind}[i].volumeMounts) ? {_add(at + ' + ' + cel_string('/-'), mount)}"
                f" : {_add(at, f'[{mount}]')})")

    wanted = "variables.countable && !variables.shmTaken && size(variables.shmTargets) + size(variables.shmInit) > 0"
    return (f"{wanted} ? [has(object.spec.volumes) ? {_add(cel_string('/spec/volumes/-'), volume)} : "
            f"{_add(cel_string('/spec/volumes'), f'[{volume}]')}] + {mounts('initContainers', 'variables.shmInit')} + "
            f"{mounts('containers', 'variables.shmTargets')} : []")


def _mutations(rules: Rules, workload: str, settings: ClassSettings) -> list[dict[str, Any]]:
    """One JSON Patch with every write of the class, each where the pod lacks it: the GPU tolerations, placement,
    ``/dev/shm``, the priority, the run-time bound, the labels and annotations (the record and its mark where the
    pod is judged whole), and the removal of a mark the policy did not write.

    One mutation, not one per kind of write: the API server converts the pod and back for each mutation, merges an
    apply configuration with the typed pod's schema (structured merge, the larger cost), and evaluates each
    mutation's variables afresh against the pod the mutations before it left (the judgement of the pod must see it
    as sent). The values are plain maps, never typed objects (a typed list in a JSON Patch value made a v1.36 API
    server panic on every pod create)."""
    plan = settings.mutate
    ops: list[str] = []
    if rules.mutation.gpu_tolerations:
        ops.append(TOLERATIONS_PATCH)
    placing = placement_patches(rules, settings)
    ops += placing
    own: list[str] = []
    if plan.shm is not None:
        own.append(_shm_ops(rules))
    priority = settings.priority_class
    if priority is not None:
        unnamed = "variables.countable && object.spec.?priorityClassName.orValue('') == ''"
        # all three: the Priority admission plugin has already resolved the pod's (an add replaces them)
        own.append(f"{unnamed} ? [{_add(cel_string('/spec/priorityClassName'), cel_string(priority.name))}, "
                   f"{_add(cel_string('/spec/priority'), str(priority.value))}, "
                   f"{_add(cel_string('/spec/preemptionPolicy'), cel_string(priority.preemption_policy))}] : []")
    if plan.active_deadline_seconds is not None:
        own.append(f"variables.countable && !has(object.spec.activeDeadlineSeconds) ? "
                   f"[{_add(cel_string('/spec/activeDeadlineSeconds'), str(plan.active_deadline_seconds))}] : []")
    labels = dict(plan.labels)
    if rules.mutation.record_profile:
        labels = {names.WORKLOAD_TYPE: workload, **labels}
    recording = native_record.records(rules, settings)
    for kind, values in (("labels", labels), ("annotations", dict(plan.annotations))):
        present = f"object.metadata.?{kind}.orValue({{}})"
        entries = [(k, f"variables.countable && !({cel_string(k)} in {present})", cel_string(v)) for k, v in values.items()]
        if recording and kind == "annotations":
            entries += native_record.record_entries()
        if entries:
            own.append(_metadata_ops(kind, entries))
    if not own and not placing:
        return []  # the toleration policy of the set takes the class's pods
    ops += own
    if recording:
        ops.append(native_record.forged_patch())
    expression = " + ".join(f"({op})" for op in ops)
    return [{"patchType": "JSONPatch", "jsonPatch": {"expression": without_bind(expression)}}]


def class_policy(rules: Rules, workload: str, namespace_expressions: list[dict[str, Any]] | None = None,
                 ) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy of one class and its binding; empty when the class changes nothing natively."""
    settings = rules.classes[workload]
    mutations = _mutations(rules, workload, settings)
    if not mutations:
        return []
    name = policy_name(workload)
    policy: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            # a convenience, like the webhook's own failurePolicy: an error admits the pod as it came
            "failurePolicy": "Ignore",
            # what it writes no later mutation removes, and it reads nothing another one adds
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}],
                                 "matchPolicy": "Equivalent"},
            "matchConditions": [{"name": "names-its-class",
                                 "expression": f"object.metadata.?annotations[?{cel_string(names.WORKLOAD_TYPE)}]"
                                               f".orValue('') == {cel_string(workload)}"}],
            "variables": _variables(rules, workload, settings),
            "mutations": mutations,
        },
    }
    binding: dict[str, Any] = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": LABELS},
               "spec": {"policyName": name, "matchResources": {"namespaceSelector": {
                   "matchExpressions": [excluded_namespaces(), *(namespace_expressions or [])]}}}}
    if _reads_facts(rules, settings):
        # the nodes' facts the server writes (`webhook.core.view.cluster_facts`); a policy whose parameter is not
        # there (yet) is not run at all (parameterNotFoundAction), and the webhook then does all of it
        policy["spec"]["paramKind"] = {"apiVersion": f"{cluster_facts.GROUP}/{cluster_facts.VERSION}",
                                       "kind": cluster_facts.KIND}
        binding["spec"]["paramRef"] = {"name": FACTS, "namespace": NAMESPACE, "parameterNotFoundAction": "Allow"}
    return [policy, binding]


TOLERATIONS = f"{PREFIX}-tolerations"


def policies(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """`ai-admission manifests native`: every class's policy, and the GPU toleration policy for the pods no class
    policy takes (a class policy writes its pods' tolerations in its own merge: one policy per pod, not two)."""
    found: list[dict[str, Any]] = []
    for workload in rules.classes:
        found += class_policy(rules, workload, namespace_expressions)
    taken = [w for w in rules.classes if class_policy(rules, w)]
    unless = {"name": "names-no-native-class",
              "expression": f"!(object.metadata.?annotations[?{cel_string(names.WORKLOAD_TYPE)}].orValue('') in "
                            f"{cel_list(taken)})"}
    # the parameter's kind; the server creates the object, and writes the nodes' facts to it
    facts = [cluster_facts.crd()] if any(_reads_facts(rules, s) for s in rules.classes.values()) else []
    return [*facts, *found, *toleration_policy(rules, namespace_expressions, name=TOLERATIONS, unless=unless)]


def _priority_class(rules: Rules, workload: str) -> str:
    """The PriorityClass a class's policy writes ('' where it writes none: a pod then names none)."""
    priority = rules.classes[workload].priority_class
    return priority.name if priority is not None else ""


def judging_classes(rules: Rules) -> list[str]:
    """The classes whose policy judges some pods whole (`native_record`): the webhooks leave those pods out."""
    return [w for w, settings in rules.classes.items()
            if native_record.records(rules, settings) and class_policy(rules, w)]


def webhook_patch(rules: Rules) -> list[dict[str, Any]]:
    """The native component's patch of the webhooks (`webhook.generate.webhooks`): each entry's matchConditions
    and the condition that leaves out a pod its class policy judged whole (`native_record.webhook_condition`).
    Whole lists, written from the same rules: a strategic merge replaces a matchConditions list."""
    classes = judging_classes(rules)
    if not classes:
        return []
    condition = native_record.webhook_condition({w: _priority_class(rules, w) for w in classes})
    patch = []
    for configuration in webhook_configurations(rules):
        entries = [{"name": w["name"], "matchConditions": [*w.get("matchConditions", []), condition]}
                   for w in configuration["webhooks"]]
        patch.append({"apiVersion": configuration["apiVersion"], "kind": configuration["kind"],
                      "metadata": {"name": configuration["metadata"]["name"]}, "webhooks": entries})
    return patch


def native_set(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The whole set, as manifests/overlays/native installs it: `policies` and the backstop's validation."""
    return [*policies(rules, namespace_expressions), *backstop_manifests(rules, namespace_expressions)]

