"""The ledger: what the native policy stands for, for every check and every step of the webhook, in code.

The native policy (`webhook.generate.native`) marks a pod it judges whole, and the webhooks' condition then leaves
that pod out: neither webhook runs for it. So every check of `webhook.core.validate.CHECKS` and every step of
`webhook.core.mutate.STEPS` must be accounted for here, keyed by the Python function itself, as one of:

- `Judged`: a CEL clause of the judgement (`webhook.generate.native_record`) that holds only where the check would
  find nothing, or the step would write nothing the policy does not write itself (a `Subset` of the Python; the
  step's own write, where the policy makes it, is the policy's: ``writes`` says so);
- `Exempt`: where ``when`` holds for a class, no pod of it is judged at all (the webhook keeps every pod, and runs
  the check or the step); elsewhere the check finds nothing and the step writes nothing, whatever the pod.

The judgement is the conjunction of the `Judged` clauses of every entry (`clauses`), and a class judges only where
no `Exempt` applies to it (`judges`): the ledger is the judgement's only source, so a check cannot run for some pods
and be skipped for the pods the policy marks. A check or step with no entry stops the generator
(`UnaccountedError`), and tests/unit/test_ledger.py says what to write.

`BACKSTOP` does the same for the reason codes the backstop's ValidatingAdmissionPolicy claims to deny: each names
the predicate of the library that finds it (`webhook.generate.cel`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from webhook.core import mutate, names, validate
from webhook.core.bypasses.rules import PATHS as BYPASS_PATHS
from webhook.core.rightsizing.rules import SMALLER_CARD
from webhook.core.rules import ClassSettings, Rules

from .cel import memory, model, paths
from .cel.model import named_by_label_only
from .cel.paths import plainly_clear, pod_containers
from .cel.text import cel_list, cel_string

Classes = Mapping[str, ClassSettings]
Clause = Callable[[Rules, Classes], str]


@dataclass(frozen=True)
class Judged:
    """The judgement stands for the check or step: each of ``clauses`` holds only where it finds nothing (a check)
    or writes nothing beyond the policy's own write (a step); ``writes``: the policy makes the step's write."""

    clauses: tuple[Clause, ...]
    why: str
    writes: bool = False


@dataclass(frozen=True)
class Exempt:
    """No pod of a class is judged where ``when(rules, settings)``; elsewhere the check finds nothing and the step
    writes nothing. ``clauses`` may still narrow what is judged where it does not apply."""

    when: Callable[[Rules, ClassSettings], bool]
    why: str
    clauses: tuple[Clause, ...] = field(default=())


Entry = Judged | Exempt


class UnaccountedError(RuntimeError):
    """A check or step of the webhook that the ledger does not account for."""


# -- the clauses: each CEL, over the pod (``object``) and the policy's variables -----------------------------

def _readable(rules: Rules, classes: Classes) -> str:
    """CEL reads the pod as the webhook does: its accelerators counted, the nodes' facts written, its model named
    and in the facts' index."""
    return "variables.countable && variables.synced && variables.model != '?' && variables.model != ''"


def _one_resource(rules: Rules, classes: Classes) -> str:
    """Whole GPUs of one listed resource, in the app containers only."""
    return "size(variables.asked) == 1 && variables.initGpus.all(g, g == 0) && variables.gpus >= 1"


def _plain_gpus(rules: Rules, classes: Classes) -> str:
    """Each app container's request of the resource is its limit (`profile._accelerator_amounts`: else
    gpu-request-limit-mismatch). Whole amounts are `asks`'s: a container whose amount is not one asks for no
    counted GPU, and is not judged (`_one_resource`, `_nothing_voided`). The API server defaults a request to its
    limit, so a pod that gives only the limit passes; one that gives only the request does not."""
    name = "variables.asked[0]"
    return (f"object.spec.containers.all(c, string(c.?resources.?limits[?{name}].orValue('-')) == "
            f"string(c.?resources.?requests[?{name}].orValue('')))")


OWN_ANNOTATIONS = (names.WORKLOAD_TYPE, names.GPU_MEMORY, names.PROFILE, names.JUDGED_BY)


def _own_annotations(rules: Rules, classes: Classes) -> str:
    """No annotation the webhook reads but the record's own: no other hint of ours (one it could refuse), no other
    scheduler's model annotation (device annotations: `plainly_clear`)."""
    foreign = [*rules.accelerators.model_annotations, *rules.accelerators.node_selector_annotations]
    notes = "object.metadata.?annotations.orValue({})"
    keys = (f"{notes}.all(k, !k.startsWith({cel_string(names.PREFIX)}) || k in {cel_list(OWN_ANNOTATIONS)})"
            + (f" && !{cel_list(sorted(foreign))}.exists(k, k in {notes})" if foreign else ""))
    return keys


def _memory_plain(rules: Rules, classes: Classes) -> str:
    """``ai-admission.io/gpu-memory`` in whole Mi, Gi or Ti (`memory.stated_plainly`, read once into
    ``memoryBytes``)."""
    return "variables.memoryBytes > 0"


def _model_by_label(rules: Rules, classes: Classes) -> str:
    return named_by_label_only(rules, keys="variables.modelKeys")


CARD_FIELDS = 6  # `webhook.core.view.cluster_facts.card_text`'s: a card of another version is not read


def _model_on_nodes(rules: Rules, classes: Classes) -> str:
    """A node of the cluster has the model (the facts hold its card; else `validate._model_not_in_cluster`)."""
    return f"size(variables.card) == {CARD_FIELDS}"


def _fits_a_node(rules: Rules, classes: Classes) -> str:
    """No more GPUs than one node of the model holds (`validate._gpu_findings`: gpu-count-exceeds-node)."""
    return "variables.gpus <= int(variables.card[1])"


def _vendor(rules: Rules, classes: Classes) -> str:
    """The resource is one of the model's vendor's (gpu-vendor-mismatch): the card's list, from the server."""
    return "variables.card[4].contains(' ' + variables.asked[0] + ' ')"


def _fits_a_card(rules: Rules, classes: Classes) -> str:
    """No more memory per GPU than one card holds (gpu-memory-exceeds)."""
    return "variables.memoryBytes <= int(variables.card[0])"


def _no_smaller_device(rules: Rules, classes: Classes) -> str:
    """No card of a smaller model of the cluster, nor a MIG slice a node offers, holds the memory stated per GPU
    (`rightsizing.findings.smaller_devices_findings`, for the classes that are told; the card's last field: the
    largest such device, `rightsizing.smaller.largest_smaller`)."""
    telling = sorted(w for w in classes if rules.rightsizing.action(SMALLER_CARD, w) != "off")
    if not telling:
        return "true"
    return f"!(variables.cls in {cel_list(telling)}) || variables.memoryBytes > int(variables.card[5])"


def _not_mig(rules: Rules, classes: Classes) -> str:
    """Not a MIG slice (its memory and model are read otherwise)."""
    if rules.accelerators.mig_pattern is None:
        return "true"
    return f"!variables.asked[0].matches({cel_string(rules.accelerators.mig_pattern.pattern)})"


def _no_priority_class(rules: Rules, classes: Classes) -> str:
    """The pod names no PriorityClass (`validate._priority_finding`; `mutate.set_priority` writes the class's)."""
    return "object.spec.?priorityClassName.orValue('') == ''"


def _priority_as_rules(rules: Rules, classes: Classes) -> str:
    """The cluster has the class's PriorityClass as the rules say (the facts' ``priorityClasses``; else the
    webhook does not set it, or leaves its value to the API server, and says so)."""
    return "variables.priorityState == 'as-rules'"


def _host_memory(rules: Rules, classes: Classes) -> str:
    """Memory for every container (`validate._host_memory_findings` warns of a GPU container without)."""
    if not rules.warn_missing_host_memory:
        return "true"
    return pod_containers("'memory' in c.?resources.?limits.orValue({})")


def _pcie(rules: Rules, classes: Classes) -> str:
    """No tensor parallelism over PCIe (`validate._tensor_parallel`)."""
    return "(variables.gpus <= 1 || variables.card[3] != 'pcie')" if rules.warn_tensor_parallel_over_pcie else "true"


def _guaranteed(rules: Rules, classes: Classes) -> str:
    """`validate._qos_finding` for the classes that ask for Guaranteed QoS: cpu and memory limits on every
    container, requests (if any) written alike."""
    asking = sorted(w for w, s in classes.items() if s.warn_guaranteed_qos)
    if not asking:
        return "true"
    each = " && ".join(f"c.?resources.?limits.?{r}.hasValue() && (!c.?resources.?requests.?{r}.hasValue() || "
                       f"string(c.resources.requests.{r}) == string(c.resources.limits.{r}))" for r in ("cpu", "memory"))
    return f"!(variables.cls in {cel_list(asking)}) || {pod_containers(each)}"


def _bypass_free(rules: Rules, classes: Classes) -> str:
    return plainly_clear(rules)


def _countable(rules: Rules, classes: Classes) -> str:
    """Every accelerator is one the policy counts (so none the rules do not know: unknown-accelerator)."""
    return "variables.countable"


def _shm_free(rules: Rules, classes: Classes) -> str:
    """No volume of the /dev/shm name yet (`mutate.add_shm` warns of one that is not memory-backed)."""
    having = _shm_classes(classes)
    return f"!(variables.cls in {cel_list(having)}) || !variables.shmTaken" if having else "true"


def _shm_classes(classes: Classes) -> list[str]:
    """The classes the webhook gives a /dev/shm."""
    return sorted(w for w, s in classes.items() if s.mutate.shm is not None)


def _memory_limit(rules: Rules, classes: Classes) -> str:
    """A memory limit the /dev/shm size is taken from (`mutate._pod_memory_limit`; else the webhook warns)."""
    having = _shm_classes(classes)
    if not having:
        return "true"
    limited = "'memory' in c.?resources.?limits.orValue({})"
    return (f"!(variables.cls in {cel_list(having)}) || "
            f"(has(object.spec.resources) && 'memory' in object.spec.resources.?limits.orValue({{}})) || "
            f"{pod_containers(limited)}")


def _single_node(rules: Rules, classes: Classes) -> str:
    """One pod, not one of a multi-node job (NCCL, packing, gang and RDMA are for those)."""
    return "variables.multiNode == 0"


def _nothing_voided(rules: Rules, classes: Classes) -> str:
    """`mutate.void_visible_devices`: every container that asks for no GPU, init containers too, would get the
    variable from the webhook; so every app container asks for GPUs and there is no init container."""
    bypasses = rules.bypasses
    voiding = sorted(w for w in classes if bypasses.visible_devices_env and bypasses.voids(w))
    if not voiding:
        return "true"
    return f"!(variables.cls in {cel_list(voiding)}) || (variables.appGpus.all(g, g > 0) && size(variables.initGpus) == 0)"


def _spread_whole(rules: Rules, classes: Classes) -> str:
    """Every spread key of the class is the pod's already or written by the policy (`mutate.add_topology` warns of
    a key the nodes lack, and spreads only by an app label)."""
    spreading = {w: s for w, s in classes.items() if s.mutate.topology_spread is not None}
    if not spreading:
        return "true"
    present = "object.spec.?topologySpreadConstraints.orValue([]).map(t, t.topologyKey)"
    return (f"!(variables.cls in {cel_list(spreading)}) || (size(variables.appLabel) == 2 && "
            f"cel.bind(pk, {present}, variables.spreading[0].filter(k, !(k in pk)).size() == "
            f"size(variables.spreadKeys)))")


# -- the exemptions -------------------------------------------------------------------------------------------

def _backend(rules: Rules, settings: ClassSettings) -> bool:
    return rules.scheduler.active


def _single_node_nccl(rules: Rules, settings: ClassSettings) -> bool:
    return settings.mutate.nccl and settings.mutate.nccl_single_node


def _pool_tolerations(rules: Rules, settings: ClassSettings) -> bool:
    return bool(settings.mutate.tolerations)


def _unrecorded(rules: Rules, settings: ClassSettings) -> bool:
    return not rules.mutation.record_profile


NCCL_SETTINGS = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE")


def _settings_unset(rules: Rules, classes: Classes) -> str:
    """No NCCL setting `webhook.core.user_settings` judges in an app container, and no container mounting anything at
    /dev/shm (stricter than the webhook: a pod that sets one goes to it)."""
    env = f"!c.?env.orValue([]).exists(e, e.name in {cel_list(list(NCCL_SETTINGS))})"
    mounts = "c.?volumeMounts.orValue([]).all(m, !m.mountPath.startsWith('/dev/shm'))"
    return f"{pod_containers(env)} && {pod_containers(mounts)}"


LEDGER: dict[Callable[..., Any], Entry] = {
    # validate.CHECKS
    validate._problems: Judged((_countable, _own_annotations, _memory_plain, _plain_gpus, _one_resource),
                               "no hint of ours but the class and a plain memory, plain GPU counts: nothing to refuse"),
    validate._gpus: Judged((_readable, _model_by_label, _model_on_nodes, _fits_a_node, _vendor, _fits_a_card,
                            _not_mig, _memory_plain),
                           "the model named and on the nodes, of the resource's vendor, the GPUs and the memory fit"),
    validate._rightsizing: Judged((_memory_plain, _model_on_nodes, _no_smaller_device),
                                  "its need is stated per GPU, so it takes every GPU it asks for (never "
                                  "gpu-over-provisioned, whose need is a whole model's: no hint of ours but the "
                                  "memory); no smaller device of the cluster holds it (the facts' card says)"),
    validate._priority: Judged((_no_priority_class, _own_annotations),
                               "the pod names no PriorityClass, so none that is not allowed; it answers no question "
                               "by annotation (ai-admission.io/preemptible), so none its class cannot honour"),
    validate._unknown_accelerators: Judged((_countable,), "every accelerator is one the rules list"),
    validate._host_memory: Judged((_host_memory,), "every container has a memory limit"),
    validate._tensor_parallel: Judged((_pcie,), "no tensor parallelism over PCIe"),
    validate._qos: Judged((_guaranteed,), "Guaranteed QoS where the class asks for it"),
    validate._whole_job: Judged((_single_node,), "a pod of no multi-node job fits where the pod fits"),
    validate._backend: Exempt(_backend, "a queueing backend's queue and topology checks read the cluster's queues"),
    validate._bypasses: Judged((_bypass_free,), "no path to a GPU but a request, tested plainly"),
    validate._user_settings: Judged((_settings_unset,), "no NCCL setting it judges and no /dev/shm of the user's"),
    # mutate.STEPS
    mutate.add_shm: Judged((_shm_free, _memory_limit), "the policy writes /dev/shm, sized as the webhook sizes it",
                           writes=True),
    mutate.add_nccl_env: Exempt(_single_node_nccl, "NCCL settings for single-node pods are the webhook's",
                                (_single_node,)),
    mutate.void_visible_devices: Judged((_nothing_voided,), "no container the webhook would void"),
    mutate.set_priority: Judged((_no_priority_class, _priority_as_rules, _own_annotations),
                                "the policy writes the class's PriorityClass, as the cluster has it; its own answer "
                                "to can-it-be-preempted (no ai-admission.io/preemptible), so the class's own",
                                writes=True),
    mutate.add_tolerations: Exempt(_pool_tolerations, "a class's pool tolerations are the webhook's",
                                   (_readable,)),
    mutate.pin_model: Judged((_model_by_label,), "a model label of the nodeSelector names the model already"),
    mutate.add_topology: Judged((_single_node, _spread_whole),
                                "the policy spreads replicas as the webhook does; a multi-node pod is the webhook's",
                                writes=True),
    mutate.add_gang: Judged((_single_node,), "the gang hints are for multi-node pods"),
    mutate.join_pod_group: Judged((_single_node,), "a PodGroup of the Workload API is for multi-node jobs"),
    mutate.add_rdma: Judged((_single_node,), "RDMA is for multi-node pods"),
    mutate.add_backend: Exempt(_backend, "a queueing backend's words on pods are the webhook's"),
    mutate.add_metadata: Judged((), "the policy writes the class's labels and annotations", writes=True),
    mutate.add_deadline: Judged((), "the policy writes the class's run-time bound", writes=True),
    mutate.record_profile: Exempt(_unrecorded, "without the record there is no judgement to write",
                                  (_memory_plain, _single_node)),
}


Functions = Iterable[Callable[..., Any]] | None


def _of(checks: Functions, steps: Functions) -> tuple[list[Callable[..., Any]], list[Callable[..., Any]]]:
    """The checks and steps to account for (the webhook's own, as they are now, by default)."""
    return (list(validate.CHECKS if checks is None else checks), list(mutate.STEPS if steps is None else steps))


def missing(checks: Functions = None, steps: Functions = None) -> list[str]:
    """What to write for each check and step the ledger does not account for (empty when it accounts for all)."""
    checks, steps = _of(checks, steps)
    found = []
    for kind, entries in (("validate.CHECKS", checks), ("mutate.STEPS", steps)):
        for entry in entries:
            if entry not in LEDGER:
                module = entry.__module__.rpartition(".")[2]
                verb = "finds nothing" if kind.startswith("validate") else "writes nothing the policy does not"
                found.append(f"{kind} has {module}.{entry.__name__}, which webhook/generate/ledger.py's LEDGER does "
                             f"not account for: add {module}.{entry.__name__}: Judged((<a clause: CEL that holds "
                             f"only where it {verb}>,), \"why\") or Exempt(<when no pod of a class may be judged>, "
                             f"\"why\")")
    return found


def stale(checks: Functions = None, steps: Functions = None) -> list[str]:
    """Entries of the ledger for functions that are no longer a check or a step."""
    checks, steps = _of(checks, steps)
    known = {*checks, *steps}
    return [f"LEDGER has {f.__module__}.{f.__name__}, which is neither in validate.CHECKS nor in mutate.STEPS"
            for f in LEDGER if f not in known]


def entries(checks: Functions = None, steps: Functions = None) -> list[Entry]:
    """The ledger's entries in the order of the checks and steps; `UnaccountedError` when one is missing."""
    checks, steps = _of(checks, steps)
    gaps = missing(checks, steps)
    if gaps:
        raise UnaccountedError("\n".join(gaps))
    return [LEDGER[f] for f in [*checks, *steps]]


def judges(rules: Rules, settings: ClassSettings) -> bool:
    """A pod of this class may be judged whole: no exemption applies to it."""
    return not any(isinstance(e, Exempt) and e.when(rules, settings) for e in entries())


def clauses(rules: Rules, classes: Classes) -> list[str]:
    """The judgement's clauses, each once, cheapest (shortest) first: the conjunction of every entry's."""
    found: dict[str, None] = {}
    for entry in entries():
        for clause in entry.clauses:
            text = clause(rules, classes)
            if text != "true":
                found[text] = None
    return sorted(found, key=len)


# -- the backstop's denials ----------------------------------------------------------------------------------

BACKSTOP: dict[str, Callable[..., Any]] = {
    "gpu-model-missing": model.named_in_view,
    "gpu-memory-missing": memory.stated_in_view,
    **{code: paths.codes_in_view for code in BYPASS_PATHS.values()},
}
