"""Check a rules document against its schema (``rules.schema.json``, beside this module) and compile it into the
frozen objects of `webhook.core.rules.model` (`webhook.config.rules_file` reads the file).

Parsing happens at start-up (and on reload), never per request. A bad file raises `RulesError` whose one-line
message names the file, the path inside it and the problem.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from importlib import resources
from typing import Any, Mapping

import jsonschema
import yaml

from ..backends.rules import SchedulerRules, compile_scheduler
from ..bypasses.rules import compile_bypasses
from ..dra.rules import compile_dra
from ..quantity import QuantityError, parse_quantity
from ..rightsizing.rules import compile_rightsizing
from .model import (
    WORKLOAD_CLASSES,
    Accelerators,
    ClassMutation,
    ClassSettings,
    CommandMatch,
    DegreeSettings,
    DeviceResource,
    EnvMatch,
    FabricNeeds,
    FabricSettings,
    FabricSignal,
    GangSpec,
    GenericKind,
    GpuModel,
    GpuNameEntry,
    GpuNameLabels,
    GpuTaint,
    InstanceType,
    LabelMatch,
    MutationSettings,
    NodeCatalogRules,
    OwnerMatch,
    PodAffinitySpec,
    PodGroupSpec,
    PriorityClassSpec,
    RdmaSpec,
    Rules,
    RulesError,
    ShareAnnotations,
    ShareResource,
    ShmSpec,
    Signal,
    SignalIndex,
    TopologyKeySet,
    TopologySettings,
    TopologySpreadSpec,
    WorldSettings,
    normalize_model_name,
)


def parse_rules(text: str, *, source: str = "<rules>") -> Rules:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "document"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RulesError(f"{source}: {where}: invalid YAML: {problem}") from exc
    return compile_rules(document, source=source)


def _schema() -> dict[str, Any]:
    return json.loads((resources.files("webhook.core.rules") / "rules.schema.json").read_text(encoding="utf-8"))


_VALIDATOR: jsonschema.protocols.Validator | None = None


def _validator() -> jsonschema.protocols.Validator:
    global _VALIDATOR
    if _VALIDATOR is None:
        schema = _schema()
        cls = jsonschema.validators.validator_for(schema)
        _VALIDATOR = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return _VALIDATOR


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _fail(source: str, path: Any, problem: str) -> RulesError:
    return RulesError(f"{source}: {_path(path)}: {problem}")


def compile_rules(document: Any, *, source: str = "<rules>") -> Rules:
    """Check ``document`` against the schema and the cross-references, and build `Rules`."""
    if not isinstance(document, dict):
        raise RulesError(f"{source}: (top level): expected a mapping of rules, got {type(document).__name__}")
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        message = error.message
        if error.validator == "pattern" and "description" in error.schema:
            message = f"{error.instance!r} is not {error.schema['description']}"
        raise _fail(source, error.absolute_path, message)

    classes = {name: _compile_class(name, spec, source) for name, spec in document["classes"].items()}
    if document["defaultClass"] not in classes:
        raise _fail(source, ["defaultClass"], f"{document['defaultClass']!r} is not one of {', '.join(WORKLOAD_CLASSES)}")

    catalog, index = _compile_catalog(document["catalog"], source)
    signals = tuple(_compile_signal(i, spec) for i, spec in enumerate(document["signals"]))
    accelerators = document["accelerators"]
    mig = accelerators.get("migPattern")
    dra = compile_dra(document.get("dra"), catalog=catalog, fail=lambda path, problem: _fail(source, ["dra", *path], problem))
    modes = document["modes"]
    validation = document.get("validation") or {}
    suffix = document.get("modelLabelSuffix")
    return Rules(
        source=source,
        default_class=document["defaultClass"],
        default_mode=modes["default"],
        namespace_modes=dict(modes.get("namespaces") or {}),
        accelerators=Accelerators(
            gpu_resources=frozenset(accelerators["resources"]) | frozenset(accelerators.get("shareResources") or ()),
            vendors={**accelerators["resources"],
                     **{name: spec["vendor"] for name, spec in (accelerators.get("shareResources") or {}).items()}},
            mig_pattern=re.compile(mig) if mig else None,
            mig_vendor=accelerators.get("migVendor", "nvidia"),
            mig_needs_model=bool(accelerators.get("migNeedsModel", False)),
            device_resources=tuple(_compile_device_resource(spec, source, i)
                                   for i, spec in enumerate(accelerators.get("deviceResources") or ())),
            memory_resources={name: _quantity(unit, source, ["accelerators", "memoryResources", name])
                              for name, unit in (accelerators.get("memoryResources") or {}).items()},
            memory_percent_resources=frozenset(accelerators.get("memoryPercentResources") or ()),
            model_annotations=tuple(accelerators.get("modelAnnotations") or ()),
            node_selector_annotations=dict(accelerators.get("nodeSelectorAnnotations") or {}),
            share_resources=_compile_share_resources(accelerators.get("shareResources") or {}, source),
            share_annotations=_compile_share_annotations(accelerators.get("shareAnnotations") or [], source),
            unknown_accelerator_pattern=_caseless(accelerators.get("unknownPattern")),
            not_devices_pattern=_caseless(accelerators.get("notDevicesPattern")),
            not_accelerators=frozenset(accelerators.get("notAccelerators") or ()),
            extended=dra.extended_resources),
        model_label_suffix=re.compile(suffix) if suffix else None,
        memory_keys=tuple(document.get("memoryKeys") or ()),
        instance_type_keys=tuple(document.get("instanceTypeKeys") or ()),
        instance_types=_compile_instance_types(document.get("instanceTypes") or {}, catalog, source),
        gpu_name_labels=_compile_gpu_name_labels(document.get("gpuNameLabels"), catalog, source),
        fabrics=_compile_fabrics(document.get("fabrics") or {}, catalog, source),
        topology=_compile_topology(document.get("topology") or {}),
        gpu_taints=tuple(GpuTaint(key=t["key"], value=t.get("value"), source=t["source"])
                         for t in (document.get("taints") or {}).get("gpu") or ()),
        world=_compile_world(document.get("worldSize") or {}),
        tensor_parallel=_compile_degree(document.get("tensorParallel")),
        parallelism=_compile_degree(document.get("parallelism")),
        rightsizing=compile_rightsizing(document.get("rightsizing"), document["classes"]),
        ray_train_pattern=re.compile(document["rayTrain"]) if document.get("rayTrain") else None,
        model_keys=tuple(document["modelKeys"]),
        precisions={k.lower(): Decimal(str(v)) for k, v in document["precisions"].items()},
        catalog=catalog,
        model_index=index,
        classes=classes,
        signals=signals,
        signal_index=SignalIndex.build(signals),
        multi_node_replica_types=frozenset(t.lower() for t in (document.get("multiNode") or {}).get("replicaTypes", [])),
        warn_missing_host_memory=bool(validation.get("warnMissingHostMemory", True)),
        warn_tensor_parallel_over_pcie=bool(validation.get("warnTensorParallelOverPCIe", True)),
        mutation=_compile_mutation_settings(document.get("mutation") or {}),
        bypasses=compile_bypasses(document.get("bypasses"), document["classes"]),
        scheduler=_compile_scheduler(document.get("scheduler"), classes, source),
        generic_kinds=tuple(GenericKind(group=k["group"], kind=k["kind"], resource=k["resource"],
                                        scope=k.get("scope", "Namespaced")) for k in document.get("genericKinds") or ()),
        dra=dra,
        node_catalog=NodeCatalogRules(
            model_without_nodes=str((document.get("nodeCatalog") or {}).get("modelWithoutNodes", "warn")),
            job_beyond_nodes=str((document.get("nodeCatalog") or {}).get("jobBeyondNodes", "warn"))),
        raw=document,
    )


def _compile_scheduler(spec: Mapping[str, Any] | None, classes: Mapping[str, ClassSettings],
                       source: str) -> SchedulerRules:
    name = (spec or {}).get("backend", "default")
    if name != "default" and name not in ((spec or {}).get("backends") or {}):
        raise _fail(source, ["scheduler", "backend"], f"{name!r} is not default or one of scheduler.backends")
    scheduler = compile_scheduler(spec)
    _check_gang(scheduler, classes, source)
    return scheduler


def _check_gang(scheduler: SchedulerRules, classes: Mapping[str, ClassSettings], source: str) -> None:
    """A class's pod-level ``gang`` (for the default scheduler's gang plugins) and a scheduler backend would both
    name the pods' scheduler and group: one of them must go."""
    if not scheduler.active:
        return
    for name, policy in classes.items():
        if policy.mutate.gang is not None:
            raise _fail(source, ["classes", name, "mutate", "gang"],
                        f"scheduler.backend {scheduler.backend.name} writes the gang on the objects it reads; "
                        f"remove the pod-level gang (or set scheduler.backend: default)")


def _compile_device_resource(spec: Mapping[str, Any], source: str, index: int) -> DeviceResource:
    pattern = re.compile(spec["pattern"], re.IGNORECASE)
    if "model" not in pattern.groupindex:
        raise _fail(source, ["accelerators", "deviceResources", index, "pattern"],
                    "needs a group (?P<model>...): the part of the name that names the GPU model")
    return DeviceResource(pattern=pattern, vendor=spec["vendor"], device=spec.get("device", "device"),
                          exclude=_caseless(spec.get("exclude")))


def _caseless(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern, re.IGNORECASE) if pattern else None


def _compile_share_resources(spec: Mapping[str, Any], source: str) -> dict[str, ShareResource]:
    return {name: ShareResource(name=name, vendor=entry["vendor"],
                                unit=_quantity(entry["unit"], source, ["accelerators", "shareResources", name, "unit"]),
                                source=entry.get("source", ""))
            for name, entry in spec.items()}


def _compile_share_annotations(spec: list[Mapping[str, Any]], source: str) -> tuple[ShareAnnotations, ...]:
    return tuple(ShareAnnotations(
        name=entry["name"], resource=entry["resource"], fraction=entry.get("fraction"), memory=entry.get("memory"),
        memory_unit=_quantity(entry.get("memoryUnit", "1"), source, ["accelerators", "shareAnnotations", i, "memoryUnit"]),
        devices=entry.get("devices"), container=entry.get("container"), source=entry.get("source", ""))
        for i, entry in enumerate(spec))


def _quantity(value: Any, source: str, where: list[Any]) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise _fail(source, where, str(exc)) from exc


def _compile_catalog(spec: Mapping[str, Any], source: str) -> tuple[dict[str, GpuModel], dict[str, GpuModel]]:
    """The models by catalog name, and an index of every name a model goes by (normalised) to the model."""
    catalog: dict[str, GpuModel] = {}
    index: dict[str, GpuModel] = {}
    for name, entry in spec.items():
        model = GpuModel(name=name, memory=_quantity(entry["memory"], source, ["catalog", name, "memory"]),
                         interconnect=str(entry["interconnect"]).lower(), gpus_per_node=int(entry["gpusPerNode"]),
                         labels=dict(entry.get("labels") or {}), vendor=entry["vendor"],
                         source=entry.get("source", ""), aliases=tuple(entry.get("aliases") or ()))
        catalog[name] = model
        for alias in model.names():
            key = normalize_model_name(alias)
            other = index.get(key)
            if other is not None and other is not model:
                raise _fail(source, ["catalog", name], f"name {alias!r} already names {other.name!r}")
            index[key] = model
    return catalog, index


def _model_ref(name: str, catalog: Mapping[str, GpuModel], source: str, where: list[Any]) -> GpuModel:
    model = catalog.get(name)
    if model is None:
        raise _fail(source, where, f"{name!r} is not a model of the catalog")
    return model


def _compile_instance_types(spec: Mapping[str, Any], catalog: Mapping[str, GpuModel],
                            source: str) -> dict[str, InstanceType]:
    return {name: InstanceType(name=name, model=_model_ref(entry["model"], catalog, source, ["instanceTypes", name, "model"]),
                               gpus=int(entry["gpus"]), fabric=entry.get("fabric"), source=entry["source"])
            for name, entry in spec.items()}


def _compile_gpu_name_labels(spec: Mapping[str, Any] | None, catalog: Mapping[str, GpuModel],
                             source: str) -> GpuNameLabels | None:
    if not spec:
        return None
    entries = tuple(GpuNameEntry(name=str(e["name"]).lower(), memory_mib=e.get("memoryMiB"),
                                 model=_model_ref(e["model"], catalog, source, ["gpuNameLabels", "models", i, "model"]))
                    for i, e in enumerate(spec.get("models") or ()))
    return GpuNameLabels(name_key=spec["nameKey"], memory_key=spec.get("memoryKey"), entries=entries)


def _compile_fabrics(spec: Mapping[str, Any], catalog: Mapping[str, GpuModel], source: str) -> FabricSettings:
    if not spec:
        return FabricSettings()
    env = {name: tuple((k, str(v)) for k, v in (values or {}).items()) for name, values in spec["env"].items()}
    named = [("default", spec["default"])]
    named += [(f"byModel.{m}", f) for m, f in (spec.get("byModel") or {}).items()]
    named += [(f"byNodeLabel[{i}]", e["fabric"]) for i, e in enumerate(spec.get("byNodeLabel") or ())]
    named += [(f"{part}[{i}]", e["fabric"]) for part in ("fromNodes", "fromPod")
              for i, e in enumerate(spec.get(part) or ())]
    named += [(f"hostInterfaces.{f}", f) for f in spec.get("hostInterfaces") or {}]
    named += [(f"needs.{f}", f) for f in spec.get("needs") or {}]
    for where, fabric in named:
        if fabric not in env:
            raise _fail(source, ["fabrics", where], f"fabric {fabric!r} has no entry under fabrics.env")
    for model in spec.get("byModel") or {}:
        _model_ref(model, catalog, source, ["fabrics", "byModel", model])
    return FabricSettings(
        default=spec["default"], by_model=dict(spec.get("byModel") or {}),
        by_node_label=tuple((e["key"], frozenset(e["values"]) if "values" in e else None, e["fabric"])
                            for e in spec.get("byNodeLabel") or ()),
        env=env,
        from_nodes=tuple(_fabric_signal(e) for e in spec.get("fromNodes") or ()),
        from_pod=tuple(_fabric_signal(e) for e in spec.get("fromPod") or ()),
        host_interfaces=dict(spec.get("hostInterfaces") or {}),
        needs={fabric: FabricNeeds(annotations=tuple(n.get("annotations") or ()), sidecars=tuple(n.get("sidecars") or ()),
                                   resources=tuple(n.get("resources") or ()), source=str(n.get("source") or ""))
               for fabric, n in (spec.get("needs") or {}).items()})


def _fabric_signal(spec: Mapping[str, Any]) -> FabricSignal:
    return FabricSignal(fabric=spec["fabric"], label=spec.get("label"),
                        values=frozenset(spec["values"]) if "values" in spec else None, resource=spec.get("resource"),
                        resource_pattern=_regex(spec.get("resourcePattern")))


def _compile_topology(spec: Mapping[str, Any]) -> TopologySettings:
    defaults = TopologySettings()
    return TopologySettings(
        key_sets=tuple(TopologyKeySet(name=s["name"], keys=tuple(s["keys"]), source=s["source"])
                       for s in spec.get("keySets") or ()),
        nvlink_domain_key=spec.get("nvlinkDomainKey"),
        zone_key=spec.get("zoneKey", defaults.zone_key), hostname_key=spec.get("hostnameKey", defaults.hostname_key))


def _compile_world(spec: Mapping[str, Any]) -> WorldSettings:
    pattern = spec.get("nodesEnvSumPattern")
    return WorldSettings(nodes_env=tuple(spec.get("nodesEnv") or ()), processes_env=spec.get("processesEnv"),
                         processes_per_node_env=spec.get("processesPerNodeEnv"),
                         nodes_env_sum_pattern=re.compile(pattern) if pattern else None,
                         nodes_args=tuple(re.compile(a) for a in spec.get("nodesArgs") or ()),
                         single_node_args=tuple(re.compile(a) for a in spec.get("singleNodeArgs") or ()))


def _compile_degree(spec: Mapping[str, Any] | None) -> DegreeSettings:
    return DegreeSettings(env=tuple((spec or {}).get("env") or ()),
                          args=tuple(re.compile(a) for a in (spec or {}).get("args") or ()))


def _compile_mutation_settings(spec: Mapping[str, Any]) -> MutationSettings:
    defaults = MutationSettings()
    return MutationSettings(
        shm_volume_name=spec.get("shmVolumeName", defaults.shm_volume_name),
        shm_in_all_containers=bool(spec.get("shmInAllContainers", defaults.shm_in_all_containers)),
        max_shm_fraction_of_memory_limit=Decimal(str(spec.get("maxShmFractionOfMemoryLimit",
                                                              defaults.max_shm_fraction_of_memory_limit))),
        gpu_tolerations=bool(spec.get("gpuTolerations", defaults.gpu_tolerations)),
        model_node_selector_key=spec.get("modelNodeSelectorKey", defaults.model_node_selector_key),
        job_labels=tuple(spec.get("jobLabels", ())),
        app_labels=tuple(spec.get("appLabels", ())),
        record_profile=bool(spec.get("recordProfile", defaults.record_profile)),
    )


def _compile_class_mutation(spec: Mapping[str, Any], where: list[Any], source: str) -> ClassMutation:
    def quantity(key: str, value: Any) -> Decimal:
        try:
            return parse_quantity(value)
        except QuantityError as exc:  # the schema's pattern admits only quantities; kept for a clear message
            raise _fail(source, [*where, "shm", key], str(exc)) from exc

    shm = spec.get("shm")
    affinity = spec.get("podAffinity")
    spread = spec.get("topologySpread")
    gang = spec.get("gang")
    group = spec.get("podGroup")
    rdma = spec.get("rdma")
    nccl = spec.get("nccl")
    return ClassMutation(
        shm=ShmSpec(per_gpu=quantity("perGpu", shm["perGpu"]), max=quantity("max", shm["max"]),
                    without_memory_limit=quantity("withoutMemoryLimit", shm["withoutMemoryLimit"])) if shm else None,
        nccl=nccl is not None,
        nccl_single_node=bool((nccl or {}).get("singleNode", False)),
        tolerations=tuple(dict(t) for t in spec.get("tolerations") or ()),
        pod_affinity=PodAffinitySpec(topology_key=affinity.get("topologyKey"), required=affinity.get("mode") == "required",
                                     weight=int(affinity.get("weight", 100))) if affinity else None,
        topology_spread=TopologySpreadSpec(topology_keys=tuple(spread["topologyKeys"]),
                                           max_skew=int(spread.get("maxSkew", 1)),
                                           when_unsatisfiable=spread.get("whenUnsatisfiable", "ScheduleAnyway"))
        if spread else None,
        gang=GangSpec(scheduler_name=gang["schedulerName"], pod_group_annotation=gang.get("podGroupAnnotation"),
                      pod_group_label=gang.get("podGroupLabel")) if gang else None,
        pod_group=PodGroupSpec(disruption_mode=group.get("disruptionMode", "PodGroup"),
                               topology=bool(group.get("topology", True))) if group is not None else None,
        rdma=RdmaSpec(resource=rdma["resource"], amount=int(rdma.get("amount", 1)),
                      ipc_lock=bool(rdma.get("ipcLock", True))) if rdma else None,
        labels=dict(spec.get("labels") or {}),
        annotations=dict(spec.get("annotations") or {}),
        active_deadline_seconds=spec.get("activeDeadlineSeconds"),
    )


def _priority_class(pc: Mapping[str, Any] | None) -> PriorityClassSpec | None:
    if not pc:
        return None
    return PriorityClassSpec(name=pc["name"], value=int(pc["value"]),
                             preemption_policy=pc.get("preemptionPolicy", "PreemptLowerPriority"),
                             description=pc.get("description", ""))


def _compile_class(name: str, spec: Mapping[str, Any], source: str) -> ClassSettings:
    priority = _priority_class(spec.get("priorityClass"))
    preemptible = bool(spec["preemptible"])
    # the class's own PriorityClass answers its own `preemptible`; the other key names the other answer's
    own_key, other_key = (("priorityClassIfPreemptible", "priorityClassIfNotPreemptible") if preemptible
                          else ("priorityClassIfNotPreemptible", "priorityClassIfPreemptible"))
    if own_key in spec:
        raise _fail(source, ["classes", name, own_key],
                    f"the class's pods are {'' if preemptible else 'not '}preemptible unless they say otherwise: "
                    f"priorityClass is theirs; {other_key} names the PriorityClass of those that say otherwise")
    otherwise = _priority_class(spec.get(other_key))
    if otherwise is not None and priority is not None and otherwise.name == priority.name:
        raise _fail(source, ["classes", name, other_key, "name"],
                    f'"{otherwise.name}" is the class\'s own priorityClass: the other answer needs another')
    allowed = set(spec.get("allowedPriorityClasses") or [])
    allowed.update(p.name for p in (priority, otherwise) if p is not None)
    return ClassSettings(name=name, preemptible=preemptible,
                       memory_factor=Decimal(str(spec["memoryFactor"])), priority_class=priority,
                       allowed_priority_classes=frozenset(allowed),
                       warn_guaranteed_qos=bool(spec.get("warnGuaranteedQoS", False)),
                       mutate=_compile_class_mutation(spec.get("mutate") or {}, ["classes", name, "mutate"], source),
                       priority_class_otherwise=otherwise)


def _regex(value: str | None) -> re.Pattern[str] | None:
    return re.compile(value) if value is not None else None


def _compile_signal(index: int, spec: Mapping[str, Any]) -> Signal:
    label_keys = frozenset(m["key"] for m in spec.get("labels", []) if "key" in m)
    owner_kinds = frozenset(o["kind"] for o in spec.get("owners", []))
    return Signal(
        label_keys=label_keys,
        owner_kinds=owner_kinds,
        workload=spec["class"],
        owners=tuple(OwnerMatch(kind=o["kind"], api_group=o.get("apiGroup")) for o in spec.get("owners", [])),
        labels=tuple(
            LabelMatch(key=m.get("key"), key_pattern=_regex(m.get("keyPattern")),
                       values=frozenset(m["values"]) if "values" in m else None,
                       value_pattern=_regex(m.get("valuePattern")))
            for m in spec.get("labels", [])
        ),
        env=tuple(
            EnvMatch(name=m.get("name"), name_pattern=_regex(m.get("namePattern")),
                     values=frozenset(m["values"]) if "values" in m else None,
                     value_pattern=_regex(m.get("valuePattern")), greater_than=m.get("greaterThan"))
            for m in spec.get("env", [])
        ),
        requires_accelerator=bool(spec.get("requiresAccelerator", False)),
        index=index,
        commands=tuple(CommandMatch(pattern=re.compile(m["pattern"])) for m in spec.get("commands", [])),
    )
