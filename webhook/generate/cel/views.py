"""The pod-shaped things of an object, as CEL: each *view* is a path, the annotation maps the controller merges into
the pod (later wins), and a pod spec.

Views come from the same kinds table the webhook walks (`webhook.core.workloads.kinds`): a site that holds a pod
template or a bare pod spec is read at its path; a site whose pod spec a builder assembles (KServe components,
Dynamo services, Spark roles, Argo templates, the vLLM runtime, KubeVirt launchers, a TrainJob) has a CEL twin
here, registered in `BUILDERS` under the Python builder it mirrors (a builder without a twin fails at generation,
naming it). Objects of other kinds may hold anything at any path, so every read is guarded by its type.

`normalized` turns views into what the backstop's rule reads (`webhook.generate.cel.pod_rule`).
"""

from __future__ import annotations

from typing import Any, Callable

from webhook.core.rules import Rules
from webhook.core.workloads import kinds as kind_table
from webhook.core.workloads.kinds import KINDS
from webhook.core.workloads.templates import BUILT, POD_SPEC, Site

from .text import cel_list, cel_string, get


def _truthy(value: str) -> str:
    """Python's truth of a JSON value, as the builders test their fields."""
    return (f"cel.bind(tv, {value}, (type(tv) == string && tv != '') || (type(tv) == int && tv != 0) || "
            f"(type(tv) == double && tv != 0.0) || (type(tv) == bool && tv) || "
            f"((type(tv) == map || type(tv) == list) && size(tv) > 0))")


def _integer(value: str) -> str:
    """The builders' ``_int``: a number, or digits in a string; else 0."""
    return (f"cel.bind(iv, {value}, type(iv) == int ? iv : "
            f"(type(iv) == string && iv.trim().matches('^[0-9]+$') ? int(iv.trim()) : 0))")


def _or_null(root: str, field: str) -> str:
    """A field that counts only when set and not null (the builders' ``x.get(k) is not None``)."""
    return f"{root}.?{field}.orValue(null)"


def _first_set(*values: str, default: str) -> str:
    """The first of ``values`` that is not null (each an expression that may be null), else ``default``."""
    expression = default
    for value in reversed(values):
        expression = f"cel.bind(fs, {value}, fs != null ? fs : {expression})"
    return expression


def annotation(v: str, key: str) -> str:
    """The string value of annotation ``key`` in the merge of the view's sources (the last that has it), or ''."""
    k = cel_string(key)
    return (f"cel.bind(hit, {v}.a.filter(m, type(m) == map && {k} in m && type(m[{k}]) == string), "
            f"size(hit) > 0 ? hit[size(hit) - 1][{k}] : '')")


def resources_of(containers: str) -> str:
    """The resources maps of a list of containers (non-maps left out, as the webhook does)."""
    return (f"cel.bind(cl, {containers}, type(cl) == list ? "
            f"cl.filter(x, type(x) == map).map(x, x.?resources.orValue({{}})) : [])")


def terms(spec: str) -> str:
    """The required node-affinity terms of a pod spec (terms are alternatives, a term's expressions all hold)."""
    return (f"{spec}.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms"
            f".orValue([])")


class Views:
    """The views of the kinds, as CEL."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules

    def view(self, path: str, annotations: list[str], spec: str) -> str:
        """One view: ``path`` (a CEL string), the annotation maps merged into the pod's (later wins), and its pod
        spec (read by `normalized`)."""
        return f"{{'p': dyn({path}), 'a': dyn([{', '.join(annotations)}]), 's': dyn({spec})}}"

    # -- sites of the kinds table --------------------------------------------------------------------------------

    def site_views(self, site: Site, root: str, prefix: str) -> str:
        """A CEL list of the views of ``site`` in the object ``root``; paths start with ``prefix``.

        A path has at most one wildcard (``a.*`` every value of a map, ``a[]`` every item of a list), as every
        kind in the table does; each element gives a list of at most one view, flattened.
        """
        parts = site.path.split(".")
        wild = [i for i, part in enumerate(parts) if part == "*" or part.endswith("[]")]
        assert len(wild) <= 1, f"{site.path}: one wildcard at most"
        if not wild:
            found = self._element(site, "se", root, cel_string(prefix + site.path))
            return f"cel.bind(se, {get(root, site.path, 'null')}, type(se) == map ? {found} : [])"
        (at,) = wild
        listed = parts[at].endswith("[]")
        before = ".".join(parts[:at] + ([parts[at][:-2]] if listed else []))
        after = ".".join(parts[at + 1:])
        if listed:
            collection = f"cel.bind(s0, {get(root, before, '[]')}, type(s0) == list ? s0 : [])"
            path = f"{cel_string(prefix + before + '[')} + string(k) + ']'"
        else:
            collection = f"cel.bind(s0, {get(root, before, '{}')}, type(s0) == map ? s0 : {{}})"
            path = f"{cel_string(prefix + before + '.')} + string(k)"
        if after:
            path = f"{path} + {cel_string('.' + after)}"
        found = self._element(site, "se", root, path)
        each = f"cel.bind(se, {get('x', after, 'null')}, type(se) == map ? {found} : [])"
        keys = "lists.range(size(sc))" if listed else "sc"  # a list's indices, a map's keys
        return (f"cel.bind(sc, {collection}, {keys}.map(k, cel.bind(x, sc[k], {each})))"
                ".filter(vs, size(vs) > 0).map(vs, vs[0])")

    def _element(self, site: Site, element: str, root: str, path: str) -> str:
        """A list of at most one view: the pod of ``site`` at ``element`` (none when the template is absent)."""
        if site.form == BUILT:
            assert site.build is not None
            build = BUILDERS.get(site.build)
            assert build is not None, f"no CEL twin for builder {site.build.__name__}"
            return build(self, element, root, path)
        where = f"{path} + {cel_string('.' + site.template)}" if site.template else path
        template = f"cel.bind(tt, {get(element, site.template, '{}')}, type(tt) == map ? tt : {{}})"
        if site.form == POD_SPEC:
            return f"cel.bind(t, {template}, size(t) > 0 ? [{self.view(where, [], 't')}] : [])"
        return (f"cel.bind(t, {template}, size(t) > 0 ? "
                f"[{self.view(where, ['t.?metadata.?annotations.orValue({})'], 't.?spec.orValue({})')}] : [])")

    def kind_views(self, group: str, kind: str, root: str, prefix: str = "") -> str | None:
        """A CEL list of the views of an object of ``kind`` (None: a kind the policy cannot read)."""
        special = EXPANDED.get((group, kind))
        if special is not None:
            return special(self, root, prefix)
        entry = KINDS[(group, kind)]
        if not entry.sites:
            return None
        return " + ".join(f"({self.site_views(site, root, prefix)})" for site in entry.sites)


# -- builders' twins: each mirrors one builder of webhook.core.workloads.kinds, field for field, as a pod spec -------------------

def _spec(containers: str, init: str = "[]", node_selector: str = "{}", affinity: str = "{}",
          claims: str = "[]") -> str:
    """A pod spec map of the fields the rule reads."""
    return (f"{{'containers': dyn({containers}), 'initContainers': dyn({init}), 'nodeSelector': dyn({node_selector}), "
            f"'affinity': dyn({affinity}), 'resourceClaims': dyn({claims})}}")


def _maps(items: str) -> str:
    """The items of a list that are maps (containers as the builders keep them)."""
    return f"cel.bind(ml, {items}, type(ml) == list ? ml.filter(x, type(x) == map) : [])"


def _component(cel: Views, e: str, o: str, path: str) -> str:
    """KServe `_component`: the first model-server field that is a non-empty map, then ``containers``."""
    frameworks = cel_list(kind_table._FRAMEWORKS)
    servers = f"{frameworks}.filter(f, f in {e} && type({e}[f]) == map && size({e}[f]) > 0).map(f, {e}[f])"
    containers = f"(size(sv) > 0 ? [sv[0]] : []) + {_maps(e + '.?containers.orValue([])')}"
    spec = _spec("cn", f"{e}.?initContainers.orValue([])", f"{e}.?nodeSelector.orValue({{}})",
                 f"{e}.?affinity.orValue({{}})", f"{e}.?resourceClaims.orValue([])")
    view = cel.view(path, [f"{o}.?metadata.?annotations.orValue({{}})", f"{e}.?annotations.orValue({{}})"], spec)
    return f"cel.bind(sv, {servers}, cel.bind(cn, {containers}, size(cn) > 0 ? [{view}] : []))"


def _isvc_worker(cel: Views, e: str, o: str, path: str) -> str:
    """KServe `_isvc_worker`: the multi-node predictor's ``workerSpec``, a pod spec of its own."""
    view = cel.view(f"{path} + '.workerSpec'", [f"{o}.?metadata.?annotations.orValue({{}})"], "w")
    return (f"cel.bind(w, {e}.?workerSpec.orValue({{}}), type(w) == map && "
            f"size({_maps('w.?containers.orValue([])')}) > 0 ? [{view}] : [])")


def _dynamo_part(rs: str, part: str) -> str:
    """`_dynamo_resources` for one part: ``gpu`` under ``gpuType`` (default nvidia.com/gpu)."""
    item = f"{rs}.?{part}.orValue({{}})"
    gpu_type = f"cel.bind(gt, it.?gpuType.orValue(''), {_truthy('gt')} ? string(gt) : 'nvidia.com/gpu')"
    return (f"cel.bind(it, {item}, type(it) == map && {_truthy('it.?gpu.orValue(0)')} ? "
            f"{{{gpu_type}: string(it.gpu)}} : {{}})")


CUSTOM = "rs[pt][?'custom'].orValue(0)"  # a part's custom resources


def _dynamo_service(cel: Views, e: str, o: str, path: str) -> str:
    """Dynamo `_dynamo_service`: ``resources`` (gpu under gpuType, custom) replace the main container's own when
    they give anything; the rest comes from ``extraPodSpec``."""
    given = ("['requests', 'limits'].exists(pt, pt in rs && type(rs[pt]) == map && "
             f"(['cpu', 'memory', 'gpu'].exists(f, {_truthy('rs[pt][?f].orValue(0)')}) || {_truthy(CUSTOM)}))")
    main = (f"({given} ? [dyn({{'resources': {{'limits': {_dynamo_part('rs', 'limits')}, "
            f"'requests': {_dynamo_part('rs', 'requests')}}}}}), dyn({{'resources': {{'limits': "
            f"rs.?limits.?custom.orValue({{}}), 'requests': rs.?requests.?custom.orValue({{}})}}}})] : "
            f"[dyn({{'resources': ex.?mainContainer.?resources.orValue({{}})}})])")
    spec = _spec(f"{main} + {_maps('ex.?containers.orValue([])')}", "ex.?initContainers.orValue([])",
                 "ex.?nodeSelector.orValue({})", "ex.?affinity.orValue({})", "ex.?resourceClaims.orValue([])")
    view = cel.view(path, [f"{o}.?metadata.?annotations.orValue({{}})", f"{e}.?annotations.orValue({{}})",
                           f"{e}.?extraPodMetadata.?annotations.orValue({{}})"], spec)
    return (f"cel.bind(rs, cel.bind(r0, {e}.?resources.orValue({{}}), type(r0) == map ? r0 : {{}}), "
            f"cel.bind(ex, cel.bind(x0, {e}.?extraPodSpec.orValue({{}}), type(x0) == map ? x0 : {{}}), [{view}]))")


def _vllm_runtime(cel: Views, e: str, o: str, path: str) -> str:
    """vLLM production stack `_vllm_runtime`: ``deploymentConfig.resources.gpu`` under ``gpuType``."""
    gpu_type = f"cel.bind(gt, rs.?gpuType.orValue(''), {_truthy('gt')} ? string(gt) : 'nvidia.com/gpu')"
    amounts = f"cel.bind(g, rs.?gpu.orValue(0), {_truthy('g')} ? {{{gpu_type}: string(g)}} : {{}})"
    affinity = ("{'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': "
                "{'nodeSelectorTerms': cf.?nodeSelectorTerms.orValue([])}}}")
    spec = _spec(f"cel.bind(am, {amounts}, [{{'resources': {{'limits': am, 'requests': am}}}}])", affinity=affinity)
    view = cel.view(path, [f"{o}.?metadata.?annotations.orValue({{}})", "cf.?podAnnotations.orValue({})"], spec)
    return f"cel.bind(cf, {e}.?deploymentConfig.orValue({{}}), cel.bind(rs, cf.?resources.orValue({{}}), [{view}]))"


def _spark_pod(cel: Views, e: str, o: str, path: str) -> str:
    """Spark operator `_spark_pod`: memory, cores or gpu replace the first container's resources."""
    gpu = f"{e}.?gpu.orValue({{}})"
    gpu_ok = f"({_truthy(f'{gpu}.?name.orValue(0)')} && {_integer(f'{gpu}.?quantity.orValue(0)')} > 0)"
    limited = f"({_truthy(f'{e}.?memory.orValue(0)')} || {_truthy(f'{e}.?cores.orValue(0)')} || {gpu_ok})"
    main = (f"({limited} ? [{{'resources': ({gpu_ok} ? {{'limits': {{string({gpu}.name): string({gpu}.quantity)}}}} "
            f": {{}})}}] : (size(bc) > 0 ? [bc[0]] : []))")
    rest = "(size(bc) > 1 ? bc.slice(1, size(bc)) : [])"
    init = _first_set(_or_null(e, "initContainers"), default="bs.?initContainers.orValue([])")
    node_selector = _first_set(_or_null(e, "nodeSelector"), _or_null(f"{o}.?spec.orValue({{}})", "nodeSelector"),
                               default="bs.?nodeSelector.orValue({})")
    affinity = _first_set(_or_null(e, "affinity"), default="bs.?affinity.orValue({})")
    view = cel.view(path, ["bt.?metadata.?annotations.orValue({})", f"{e}.?annotations.orValue({{}})"],
                    _spec(f"{main} + {rest}", init, node_selector, affinity))
    return (f"cel.bind(bt, {e}.?template.orValue({{}}), cel.bind(bs, bt.?spec.orValue({{}}), "
            f"cel.bind(bc, {_maps('bs.?containers.orValue([])')}, [{view}])))")


def _argo_pod(cel: Views, e: str, o: str, path: str) -> str:
    """Argo `_argo_pod`: ``container``, ``script`` and ``containerSet`` make the pod; the workflow's
    nodeSelector, affinity and podMetadata apply unless the template sets its own."""
    workflow = (f"cel.bind(ws, {o}.?spec.?workflowSpec.orValue({{}}), {_truthy('ws')} ? ws : "
                f"{o}.?spec.orValue({{}}))")
    mains = (f"['container', 'script'].filter(f, f in {e} && type({e}[f]) == map && size({e}[f]) > 0)"
             f".map(f, {e}[f]) + {_maps(e + '.?containerSet.?containers.orValue([])')}")
    node_selector = _first_set(_or_null(e, "nodeSelector"), _or_null("wf", "nodeSelector"), default="{}")
    affinity = _first_set(_or_null(e, "affinity"), _or_null("wf", "affinity"), default="{}")
    spec = _spec(f"mc + {_maps(e + '.?sidecars.orValue([])')}", f"{e}.?initContainers.orValue([])",
                 node_selector, affinity)
    view = cel.view(path, ["wf.?podMetadata.?annotations.orValue({})", f"{e}.?metadata.?annotations.orValue({{}})"],
                    spec)
    return f"cel.bind(wf, {workflow}, cel.bind(mc, {mains}, size(mc) > 0 ? [{view}] : []))"


def _launcher(cel: Views, spec: str, annotations: str, path: str) -> str:
    """KubeVirt `_launcher`: one container per device of ``domain.devices.gpus`` and ``.hostDevices``, asking for
    its deviceName (the rule reads whether a container asks, not how many)."""
    devices = f"{spec}.?domain.?devices"
    listed = " + ".join(f"cel.bind(dl, {devices}.?{field}.orValue([]), type(dl) == list ? dl : [])"
                        for field in kind_table._VMI_DEVICE_LISTS)
    names = (f"({listed}).filter(d, type(d) == map && type(d.?deviceName.orValue(0)) == string && "
             f"d.deviceName != '').map(d, d.deviceName)")
    containers = "dn.map(n, {'resources': {'limits': {n: '1'}}})"
    view = cel.view(path, [annotations], _spec("cn", "[]", f"{spec}.?nodeSelector.orValue({{}})",
                                                 f"{spec}.?affinity.orValue({{}})"))
    return f"cel.bind(dn, {names}, cel.bind(cn, {containers}, size(cn) > 0 ? [{view}] : []))"


def _vmi_launcher(cel: Views, e: str, o: str, path: str) -> str:
    return _launcher(cel, e, f"{o}.?metadata.?annotations.orValue({{}})", path)


def _vm_launcher(cel: Views, e: str, o: str, path: str) -> str:
    return _launcher(cel, f"{e}.?spec.orValue({{}})", f"{e}.?metadata.?annotations.orValue({{}})", path)


BUILDERS: dict[Any, Callable[[Views, str, str, str], str]] = {
    kind_table._component: _component, kind_table._isvc_worker: _isvc_worker,
    kind_table._dynamo_service: _dynamo_service, kind_table._vllm_runtime: _vllm_runtime,
    kind_table._spark_pod: _spark_pod, kind_table._argo_pod: _argo_pod,
    kind_table._vmi_launcher: _vmi_launcher, kind_table._vm_launcher: _vm_launcher,
}


def _train_job(cel: Views, o: str, prefix: str) -> str:
    """`_train_job` as the server runs it (the runtime is not looked up): the TrainJob's own fields."""
    spec = f"{o}.?spec.orValue({{}})"
    trainer = f"{spec}.?trainer.orValue({{}})"
    containers = (f"(type({trainer}) == map && 'resourcesPerNode' in {trainer} ? "
                  f"[{{'resources': {trainer}.resourcesPerNode}}] : [])")
    return "[" + cel.view(cel_string(prefix + "spec.trainer"),
                          [f"{spec}.?annotations.orValue({{}})", f"{o}.?metadata.?annotations.orValue({{}})"],
                          _spec(containers)) + "]"


# A Katib Experiment is read through its trial spec, as the object of the trial's own kind, by that kind's
# variable of the policy (`_template_variables`); no reader of its own.
EXPERIMENT = ("kubeflow.org", "Experiment")
TRIAL_PREFIX = "spec.trialTemplate.trialSpec."


def _trial(o: str) -> str:
    """A Katib Experiment's trial spec, the object of its own kind (``{}`` when it is not an object)."""
    return f"cel.bind(t0, {o}.?spec.?trialTemplate.?trialSpec.orValue({{}}), type(t0) == map ? t0 : {{}})"


def _group(tr: str) -> str:
    """The API group of an object by its apiVersion (``''``: the core group)."""
    return (f"cel.bind(av, {tr}.?apiVersion.orValue(''), type(av) == string && av.contains('/') ? "
            "av.substring(0, av.lastIndexOf('/')) : '')")


EXPANDED: dict[tuple[str, str], Callable[[Views, str, str], str]] = {
    ("trainer.kubeflow.org", "TrainJob"): _train_job,
}
