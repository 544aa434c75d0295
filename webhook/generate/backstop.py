"""A backstop that cannot be down: the heart of the policy as a ValidatingAdmissionPolicy, generated from the rules.

The webhooks run with ``failurePolicy: Ignore`` (an outage must not stop every pod in the cluster), so while the
server is unreachable a bare ``nvidia.com/gpu`` pod is admitted unchecked. A ValidatingAdmissionPolicy runs in
the API server itself. This module writes one, in CEL, for the rule at the heart of ai-admission: a pod, or a pod
template of a kind ai-admission judges, that asks for an accelerator must say which GPU model and how much GPU
memory, in any of the ways the webhook accepts. It denies exactly what the webhook denies as
``gpu-model-missing`` or ``gpu-memory-missing`` (tests/e2e/test_backstop.py holds every fixture to that through a
real API server), and nothing else: unknown models, sizes that do not fit and everything else stay the webhook's.

How the CEL is built. Each pod-shaped thing of the request's object becomes a *view*: its path, the annotation
maps the controller merges into the pod (later wins), and its pod spec. Views come from the same kind table the
webhook walks (`webhook.core.workloads.kinds`): a site that holds a pod template or a bare pod spec is read at its path; a site
whose pod spec a builder assembles (KServe components, Dynamo services, Spark roles, Argo templates, the vLLM
runtime, a TrainJob) has a CEL twin here, keyed by the builder, that assembles the fields the rule reads. The
rule (`Rule`) then runs once over the views: every container's resources, the nodeSelector, the required
node-affinity terms, the annotations. Each check names the webhook function it mirrors. The expressions are
written with ``cel.bind`` for readability; the admission environment has none, so `without_bind` rewrites each
into a one-element ``map`` before they are printed.

What a policy cannot do, and so does not: it cannot read other objects. A pod that takes DRA claims may have its
model and memory in them, so such a pod (when the rules know GPU device classes) is left to the webhook; so is a
Katib trial of a kind ai-admission does not know (the webhook finds its pod specs by shape). On UPDATE, a
template whose facts are unchanged is not judged again (the webhook re-judges any changed template).

The API server must be 1.33 or later (two-variable comprehensions; quantities and optionals from 1.29).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from webhook.core import names
from webhook.core.bypasses.rules import PATHS as BYPASS_PATHS
from webhook.core.dra.rules import DEVICE_CLASS_RESOURCE_PREFIX
from webhook.core.names import MODE_LABEL
from webhook.core.quantity import BINARY_UNITS
from webhook.core.rules import MODES, Rules
from webhook.core.validate import memory_fix, model_fix
from webhook.core.workloads import kinds as kind_table
from webhook.core.workloads.kinds import KINDS
from webhook.core.workloads.templates import BUILT, POD_SPEC, Site

from .match_conditions import (
    accelerator_clause,
    bypass_clauses,
    caseless_regex,
    cel_list,
    cel_regex,
    cel_string,
    share_annotation_clause,
)
from .webhooks import EXCLUDED_NAMESPACES, excluded_namespaces

NAME = "ai-admission-gpu-model-and-memory"
ACTIONS = {"deny": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}


# -- CEL building blocks -----------------------------------------------------------------------------------------

def _opt(root: str, dotted: str) -> str:
    """``root.?a.?b`` (an optional); ``dotted`` empty: ``root`` itself as an optional."""
    return root + "".join(f".?{part}" for part in dotted.split(".")) if dotted else f"optional.of({root})"


def _get(root: str, dotted: str, default: str) -> str:
    return f"{_opt(root, dotted)}.orValue({default})" if dotted else root


def _truthy(value: str) -> str:
    """Python's truth of a JSON value, as the builders test their fields."""
    return (f"cel.bind(tv, {value}, (type(tv) == string && tv != '') || (type(tv) == int && tv != 0) || "
            f"(type(tv) == double && tv != 0.0) || (type(tv) == bool && tv) || "
            f"((type(tv) == map || type(tv) == list) && size(tv) > 0))")


def _integer(value: str) -> str:
    """The builders' ``_int``: a number, or digits in a string; else 0."""
    return (f"cel.bind(iv, {value}, type(iv) == int ? iv : "
            f"(type(iv) == string && iv.trim().matches('^[0-9]+$') ? int(iv.trim()) : 0))")


def byte_quantity(value: str) -> str:
    """`webhook.core.quantity.format_quantity` of a whole byte count ``value``: the largest binary suffix that
    divides it."""
    expression = f"string({value})"
    for suffix, unit in BINARY_UNITS.items():  # Ki first: the largest suffix ends up outermost
        expression = f"({value} % {unit} == 0 ? string({value} / {unit}) + '{suffix}' : {expression})"
    return f"({value} == 0 ? '0' : {expression})"


def positive_amount(value: str) -> str:
    """A positive whole amount, as the webhook reads an accelerator's (`webhook.core.profile`)."""
    return (f"cel.bind(q, {quantity_text(value)}, isQuantity(q) && quantity(q).isInteger() && "
            f"quantity(q).isGreaterThan(quantity('0')))")


def with_limits_and_requests(resources: str, body: str) -> str:
    """``body`` with ``li`` and ``rq`` bound to the limits and requests of ``resources`` (maps, whatever was sent)."""
    return (f"cel.bind(rr, {resources}, "
            f"cel.bind(li, cel.bind(l0, type(rr) == map ? rr.?limits.orValue({{}}) : {{}}, "
            f"type(l0) == map ? l0 : {{}}), "
            f"cel.bind(rq, cel.bind(r0, type(rr) == map ? rr.?requests.orValue({{}}) : {{}}, "
            f"type(r0) == map ? r0 : {{}}), "
            f"{body})))")


def asked_names(test: str) -> str:
    """Within `with_limits_and_requests`: the resources ``n`` that pass ``test`` and ask for a positive whole
    amount, the limit's, else the request's."""
    return (f"li.filter(n, {test} && {positive_amount('li[n]')}) + "
            f"rq.filter(n, !(n in li) && {test} && {positive_amount('rq[n]')})")


def quantity_text(value: str) -> str:
    """A quantity as the webhook reads it: a string (trimmed) or a number written as one."""
    return (f"cel.bind(qv, {value}, type(qv) == string ? qv.trim() : "
            f"((type(qv) == int || type(qv) == uint || type(qv) == double) ? string(qv) : ''))")


def _or_null(root: str, field: str) -> str:
    """A field that counts only when set and not null (the builders' ``x.get(k) is not None``)."""
    return f"{root}.?{field}.orValue(null)"


def _first_set(*values: str, default: str) -> str:
    """The first of ``values`` that is not null (each an expression that may be null), else ``default``."""
    expression = default
    for value in reversed(values):
        expression = f"cel.bind(fs, {value}, fs != null ? fs : {expression})"
    return expression


def _annotation(v: str, key: str) -> str:
    """The string value of annotation ``key`` in the merge of the view's sources (the last that has it), or ''."""
    k = cel_string(key)
    return (f"cel.bind(hit, {v}.a.filter(m, type(m) == map && {k} in m && type(m[{k}]) == string), "
            f"size(hit) > 0 ? hit[size(hit) - 1][{k}] : '')")


def _resources(containers: str) -> str:
    """The resources maps of a list of containers (non-maps left out, as the webhook does)."""
    return (f"cel.bind(cl, {containers}, type(cl) == list ? "
            f"cl.filter(x, type(x) == map).map(x, x.?resources.orValue({{}})) : [])")


def _terms(spec: str) -> str:
    """The required node-affinity terms of a pod spec (terms are alternatives, a term's expressions all hold)."""
    return (f"{spec}.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms"
            f".orValue([])")


class Cel:
    """The views of the kinds, as CEL."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules

    def view(self, path: str, annotations: list[str], spec: str) -> str:
        """One view: ``path`` (a CEL string), the annotation maps merged into the pod's (later wins), and its pod
        spec (read by `Rule.normalized`)."""
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
            return f"cel.bind(se, {_get(root, site.path, 'null')}, type(se) == map ? {found} : [])"
        (at,) = wild
        listed = parts[at].endswith("[]")
        before = ".".join(parts[:at] + ([parts[at][:-2]] if listed else []))
        after = ".".join(parts[at + 1:])
        if listed:
            collection = f"cel.bind(sc, {_get(root, before, '[]')}, type(sc) == list ? sc : [])"
            path = f"{cel_string(prefix + before + '[')} + string(k) + ']'"
        else:
            collection = f"cel.bind(sc, {_get(root, before, '{}')}, type(sc) == map ? sc : {{}})"
            path = f"{cel_string(prefix + before + '.')} + string(k)"
        if after:
            path = f"{path} + {cel_string('.' + after)}"
        found = self._element(site, "se", root, path)
        each = f"cel.bind(se, {_get('x', after, 'null')}, type(se) == map ? {found} : [])"
        return f"{collection}.transformList(k, x, {each}).filter(vs, size(vs) > 0).map(vs, vs[0])"

    def _element(self, site: Site, element: str, root: str, path: str) -> str:
        """A list of at most one view: the pod of ``site`` at ``element`` (none when the template is absent)."""
        if site.form == BUILT:
            assert site.build is not None
            build = BUILDERS.get(site.build)
            assert build is not None, f"no CEL twin for builder {site.build.__name__}"
            return build(self, element, root, path)
        where = f"{path} + {cel_string('.' + site.template)}" if site.template else path
        template = f"cel.bind(tt, {_get(element, site.template, '{}')}, type(tt) == map ? tt : {{}})"
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


def _component(cel: Cel, e: str, o: str, path: str) -> str:
    """KServe `_component`: the first model-server field that is a non-empty map, then ``containers``."""
    frameworks = cel_list(kind_table._FRAMEWORKS)
    servers = f"{frameworks}.filter(f, f in {e} && type({e}[f]) == map && size({e}[f]) > 0).map(f, {e}[f])"
    containers = f"(size(sv) > 0 ? [sv[0]] : []) + {_maps(e + '.?containers.orValue([])')}"
    spec = _spec("cn", f"{e}.?initContainers.orValue([])", f"{e}.?nodeSelector.orValue({{}})",
                 f"{e}.?affinity.orValue({{}})", f"{e}.?resourceClaims.orValue([])")
    view = cel.view(path, [f"{o}.?metadata.?annotations.orValue({{}})", f"{e}.?annotations.orValue({{}})"], spec)
    return f"cel.bind(sv, {servers}, cel.bind(cn, {containers}, size(cn) > 0 ? [{view}] : []))"


def _isvc_worker(cel: Cel, e: str, o: str, path: str) -> str:
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


def _dynamo_service(cel: Cel, e: str, o: str, path: str) -> str:
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


def _vllm_runtime(cel: Cel, e: str, o: str, path: str) -> str:
    """vLLM production stack `_vllm_runtime`: ``deploymentConfig.resources.gpu`` under ``gpuType``."""
    gpu_type = f"cel.bind(gt, rs.?gpuType.orValue(''), {_truthy('gt')} ? string(gt) : 'nvidia.com/gpu')"
    amounts = f"cel.bind(g, rs.?gpu.orValue(0), {_truthy('g')} ? {{{gpu_type}: string(g)}} : {{}})"
    affinity = ("{'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': "
                "{'nodeSelectorTerms': cf.?nodeSelectorTerms.orValue([])}}}")
    spec = _spec(f"cel.bind(am, {amounts}, [{{'resources': {{'limits': am, 'requests': am}}}}])", affinity=affinity)
    view = cel.view(path, [f"{o}.?metadata.?annotations.orValue({{}})", "cf.?podAnnotations.orValue({})"], spec)
    return f"cel.bind(cf, {e}.?deploymentConfig.orValue({{}}), cel.bind(rs, cf.?resources.orValue({{}}), [{view}]))"


def _spark_pod(cel: Cel, e: str, o: str, path: str) -> str:
    """Spark operator `_spark_pod`: memory, cores or gpu replace the first container's resources."""
    gpu = f"{e}.?gpu.orValue({{}})"
    gpu_ok = f"({_truthy(f'{gpu}.?name.orValue(0)')} && {_integer(f'{gpu}.?quantity.orValue(0)')} > 0)"
    limited = f"({_truthy(f'{e}.?memory.orValue(0)')} || {_truthy(f'{e}.?cores.orValue(0)')} || {gpu_ok})"
    main = (f"({limited} ? [{{'resources': ({gpu_ok} ? {{'limits': {{string({gpu}.name): string({gpu}.quantity)}}}} "
            f": {{}})}}] : (size(bc) > 0 ? [bc[0]] : []))")
    rest = "bc.transformList(i, x, i > 0, x)"
    init = _first_set(_or_null(e, "initContainers"), default="bs.?initContainers.orValue([])")
    node_selector = _first_set(_or_null(e, "nodeSelector"), _or_null(f"{o}.?spec.orValue({{}})", "nodeSelector"),
                               default="bs.?nodeSelector.orValue({})")
    affinity = _first_set(_or_null(e, "affinity"), default="bs.?affinity.orValue({})")
    view = cel.view(path, ["bt.?metadata.?annotations.orValue({})", f"{e}.?annotations.orValue({{}})"],
                    _spec(f"{main} + {rest}", init, node_selector, affinity))
    return (f"cel.bind(bt, {e}.?template.orValue({{}}), cel.bind(bs, bt.?spec.orValue({{}}), "
            f"cel.bind(bc, {_maps('bs.?containers.orValue([])')}, [{view}])))")


def _argo_pod(cel: Cel, e: str, o: str, path: str) -> str:
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


def _launcher(cel: Cel, spec: str, annotations: str, path: str) -> str:
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


def _vmi_launcher(cel: Cel, e: str, o: str, path: str) -> str:
    return _launcher(cel, e, f"{o}.?metadata.?annotations.orValue({{}})", path)


def _vm_launcher(cel: Cel, e: str, o: str, path: str) -> str:
    return _launcher(cel, f"{e}.?spec.orValue({{}})", f"{e}.?metadata.?annotations.orValue({{}})", path)


BUILDERS: dict[Any, Callable[[Cel, str, str, str], str]] = {
    kind_table._component: _component, kind_table._isvc_worker: _isvc_worker,
    kind_table._dynamo_service: _dynamo_service, kind_table._vllm_runtime: _vllm_runtime,
    kind_table._spark_pod: _spark_pod, kind_table._argo_pod: _argo_pod,
    kind_table._vmi_launcher: _vmi_launcher, kind_table._vm_launcher: _vm_launcher,
}


def _train_job(cel: Cel, o: str, prefix: str) -> str:
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


EXPANDED: dict[tuple[str, str], Callable[[Cel, str, str], str]] = {
    ("trainer.kubeflow.org", "TrainJob"): _train_job,
}


# -- the rule, once over the views -----------------------------------------------------------------------------

def _digits(value: str) -> str:
    """A node-label value the webhook reads as a number (``str(v).strip().isdigit()``)."""
    return (f"((type({value}) == string && {value}.trim().matches('^[0-9]+$')) || "
            f"(type({value}) == int && {value} >= 0))")


class Rule:
    """The checks of one view ``v``: does it ask for an accelerator, does it name the model, state the memory.

    Each mirrors a function of the webhook (named in its docstring), so the two cannot drift apart unseen: the
    end-to-end test runs both over every fixture.
    """

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        mig = rules.mig_pattern
        self.mig_regex = _anchored(mig.pattern) if mig is not None else None
        # a MIG resource implies its memory only when the pattern names it (group ``mem``)
        self.mig_sized = mig is not None and "mem" in mig.groupindex
        # resources whose name is the device (passthrough GPUs, vGPU types): (CEL regex, whether it gives the memory)
        self.devices = [(caseless_regex(re.compile(_anchored(d.pattern.pattern))), d.sized,
                         caseless_regex(d.exclude) if d.exclude is not None else None)
                        for d in rules.device_resources]
        self.model_keys = sorted({*rules.model_keys, *rules.instance_type_keys,
                                  *([rules.gpu_name_labels.name_key] if rules.gpu_name_labels else [])})

    @staticmethod
    def _device(name: str, device: tuple[str, bool, str | None]) -> str:
        """``name`` is a resource of one of the rules' ``deviceResources`` (`Rules.device_resource`)."""
        regex, _, exclude = device
        return f"({name}.matches({regex}) && !{name}.matches({exclude}))" if exclude else f"{name}.matches({regex})"

    def accelerator(self, name: str) -> str:
        """`Rules.is_accelerator`: a listed resource, a DRA device class's, the MIG pattern, or one that looks like
        a GPU (`Rules.is_unknown_accelerator`: not a sharing parameter, not one the rules exempt)."""
        rules = self.rules
        listed = sorted(rules.gpu_resources | rules.dra.extended_resources)
        tests = [f"{name} in {cel_list(listed)}"] if listed else []
        if self.mig_regex is not None:
            tests.append(f"{name}.matches({cel_string(self.mig_regex)})")
        tests += [self._device(name, device) for device in self.devices]
        if rules.unknown_accelerator_pattern is not None:
            exempt = sorted({*rules.not_accelerators, *rules.memory_resources, *rules.memory_percent_resources})
            test = f"{name}.matches({caseless_regex(rules.unknown_accelerator_pattern)})"
            if exempt:
                test += f" && !({name} in {cel_list(exempt)})"
            if self.mig_regex is not None:
                test += f" && !{name}.matches({cel_string(self.mig_regex)})"
            test += "".join(f" && !{self._device(name, device)}" for device in self.devices)
            if rules.not_devices_pattern is not None:
                test += (f" && !{name}.substring({name}.lastIndexOf('/') + 1)"
                         f".matches({caseless_regex(rules.not_devices_pattern)})")
            tests.append(f"({test})")
        return "(" + " || ".join(tests or ["false"]) + ")"

    def shares(self, v: str) -> tuple[str, str]:
        """(asks, states memory) through a sharing scheduler's annotations (`webhook.core.profile._annotation_shares`,
        `webhook.core.models._shared_memory`): the pod asks for shares by annotation when no container asks for an
        accelerator."""
        asks, memory = [], []
        for share in self.rules.share_annotations:
            asks += [f"{_annotation(v, key)} != ''" for key in share.keys()]
            if share.memory:
                memory.append(f"cel.bind(sm, {_annotation(v, share.memory)}.trim(), "
                              f"sm.matches('^[0-9]+([.][0-9]+)?$') && double(sm) > 0.0)")
            if share.fraction:
                memory.append(f"cel.bind(sf, {_annotation(v, share.fraction)}.trim(), "
                              f"sf.matches('^[0-9]*([.][0-9]+)?$') && sf != '' && sf != '.' && "
                              f"double(sf) > 0.0 && double(sf) <= 1.0)")
        return " || ".join(asks) or "false", " || ".join(memory) or "false"

    def asked(self, resources: str) -> str:
        """`_accelerator_amounts`: the accelerators one container asks for (the limit, else the request, a positive
        whole number)."""
        return with_limits_and_requests(resources, asked_names(self.accelerator("n")))

    def names_model(self, v: str, mig: str, device: str = "false") -> str:
        """Not `gpu-model-missing` (webhook.core.profile `_choose_model`, webhook.core.models `pinned_models`,
        `annotated_models`, `device_choice`; policy `_model_findings`). ``device``: the view asks for a resource
        whose name is the device."""
        keys = cel_list(self.model_keys)
        selector = (f"(type({v}.ns) == map && {keys}.exists(k, k in {v}.ns && type({v}.ns[k]) == string && "
                    f"{v}.ns[k] != ''))")
        affinity = self._every_term(v, f"e.?operator.orValue('') == 'In' && e.?key.orValue('') in {keys} && "
                                       f"cel.bind(vl, e.?values.orValue([]), type(vl) == list && "
                                       f"vl.exists(x, type(x) == string && x != ''))")
        tests = [f"{_annotation(v, names.GPU_MODEL)}.trim() != ''", selector, affinity]
        tests += [f"{_annotation(v, key)}.split(',').exists(part, part.trim() != '')"
                  for key in self.rules.model_annotations]
        tests += [f"{_annotation(v, annotation)} != ''" for annotation, key in
                  sorted(self.rules.node_selector_annotations.items()) if key in self.rules.model_keys]
        if not self.rules.mig_needs_model:
            tests.append(mig)
        if device != "false":
            tests.append(device)
        tests.append(f"{v}.c")
        return "(" + "\n    || ".join(tests) + ")"

    def states_memory(self, v: str, mig: str) -> str:
        """Not `gpu-memory-missing` (webhook.core.hints `read_hints`, webhook.core.profile `_memory_need`, webhook.core.models
        `stated_memory`)."""
        memory = (f"cel.bind(gm, {_annotation(v, names.GPU_MEMORY)}.trim(), gm != '' && isQuantity(gm) && "
                  f"quantity(gm).isGreaterThan(quantity('0')))")
        precisions = cel_list(self.rules.precisions)
        params = (f"(cel.bind(mp, {_annotation(v, names.MODEL_PARAMS)}.trim(), "
                  f"mp.matches('^[0-9]+([.][0-9]+)?\\\\s*[kKmMbBtT]?$') && "
                  f"cel.bind(u, mp.substring(size(mp) - 1).lowerAscii(), "
                  f"cel.bind(num, u in ['k', 'm', 'b', 't'] ? mp.substring(0, size(mp) - 1).trim() : mp, "
                  f"double(num) * (u == 'k' ? 1e3 : u == 'm' ? 1e6 : u == 'b' ? 1e9 : u == 't' ? 1e12 : 1.0) "
                  f">= 1.0))) && {_annotation(v, names.MODEL_PRECISION)}.trim().lowerAscii() in {precisions})")
        tests = [memory, params]
        if self.rules.share_annotations:
            tests.append(self.shares(v)[1])
        sharing = sorted({*self.rules.memory_resources, *self.rules.memory_percent_resources,
                          *self.rules.share_resources})
        if sharing:
            amount = (f"cel.bind(q, {quantity_text('mv')}, q != '' && isQuantity(q) && "
                      f"quantity(q).isGreaterThan(quantity('0')))")
            value = ("cel.bind(li, cel.bind(l0, r.?limits.orValue({}), type(l0) == map ? l0 : {}), "
                     "cel.bind(rq, cel.bind(r0, r.?requests.orValue({}), type(r0) == map ? r0 : {}), "
                     "n in li ? li[n] : (n in rq ? rq[n] : '')))")
            tests.append(f"{v}.r.exists(r, type(r) == map && {cel_list(sharing)}.exists(n, "
                         f"cel.bind(mv, {value}, {amount})))")
        for key in self.rules.memory_keys:
            selected = (f"(type({v}.ns) == map && {cel_string(key)} in {v}.ns && "
                        f"type({v}.ns[{cel_string(key)}]) == string && "
                        f"{v}.ns[{cel_string(key)}].trim().matches('^[0-9]+$'))")
            filtered = self._every_term(v, f"e.?key.orValue('') == {cel_string(key)} && "
                                           f"e.?operator.orValue('') in ['In', 'Gt'] && "
                                           f"cel.bind(vl, e.?values.orValue([]), type(vl) == list && "
                                           f"vl.exists(x, {_digits('x')}))")
            tests.append(f"({selected} || {filtered})")
        tests += [mig, f"{v}.c"]
        return "(" + "\n    || ".join(tests) + ")"

    def normalized(self, views: str) -> str:
        """The views with what the rule reads of their pod spec: every container's resources (init containers
        too), the nodeSelector, the required node-affinity terms, and whether DRA claims may say the rest."""
        claims = "size(s.?resourceClaims.orValue([])) > 0" if self.rules.dra.device_classes else "false"
        containers = ("dyn(cel.bind(cl, s.?containers.orValue([]) + s.?initContainers.orValue([]) + "
                      "s.?ephemeralContainers.orValue([]), type(cl) == list ? cl : []))")
        return (f"{views}.map(v0, cel.bind(s, type(v0.s) == map ? v0.s : {{}}, {{'p': v0.p, 'a': v0.a, "
                f"'r': dyn({_resources('s.?containers.orValue([])')} + {_resources('s.?initContainers.orValue([])')}), "
                f"'ns': dyn(s.?nodeSelector.orValue({{}})), 't': dyn({_terms('s')}), 'c': dyn({claims}), "
                f"'cs': {containers}, 'rc': dyn(s.?runtimeClassName.orValue('')), "
                f"'vols': dyn(s.?volumes.orValue([])), 'sa': dyn(s.?serviceAccountName.orValue('default'))}}))")

    @staticmethod
    def _every_term(v: str, expression_test: str) -> str:
        """Every required node-affinity term has a match expression passing ``expression_test`` (over ``e``)."""
        return (f"(type({v}.t) == list && size({v}.t) > 0 && {v}.t.all(t, type(t) == map && "
                f"cel.bind(me, t.?matchExpressions.orValue([]), type(me) == list && "
                f"me.exists(e, type(e) == map && {expression_test}))))")

    def facts(self, views: str) -> str:
        """Per view: its path, whether it asks for an accelerator, names the model, states the memory.

        ``al`` holds each container's accelerators; a pod is a MIG pod when every accelerator it asks for is a
        MIG slice whose size the name gives (`webhook.core.profile._mig_memory`); its memory is stated, too, when
        every accelerator is a MIG slice or a vGPU type whose name gives its frame buffer
        (`webhook.core.models.device_choice`), and its model is named when one is a device-named resource.
        """
        mig = (f"(al.exists(l, size(l) > 0) && al.all(l, l.all(n, n.matches({cel_string(self.mig_regex)}))))"
               if self.mig_sized and self.mig_regex else "false")
        sized_tests = ([f"n.matches({cel_string(self.mig_regex)})"] if self.mig_sized and self.mig_regex else []) + \
            [self._device("n", device) for device in self.devices if device[1]]
        sized = mig if not any(device[1] for device in self.devices) else \
            f"(al.exists(l, size(l) > 0) && al.all(l, l.all(n, {' || '.join(sized_tests)})))"
        device = (f"al.exists(l, l.exists(n, {' || '.join(self._device('n', d) for d in self.devices)}))"
                  if self.devices else "false")
        shared = self.shares("v")[0]
        return (f"{self.normalized(views)}.map(v, cel.bind(al, v.r.map(r, {self.asked('r')}), "
                f"cel.bind(asks, al.exists(l, size(l) > 0) || ({shared}), "
                f"{{'p': dyn(v.p), 'asks': dyn(asks), 'model': dyn({self.names_model('v', mig, device)}), "
                f"'memory': dyn({self.states_memory('v', sized)}), 'bypass': dyn({self.bypasses('v')})}})))")

    def denied_paths(self) -> list[str]:
        """The bypass paths the policy can deny: denied by default and by every class (a class that only warns of
        one is the webhook's to tell), with the reason code of each."""
        bypasses = self.rules.bypasses
        return [code for path, code in BYPASS_PATHS.items()
                if bypasses.actions.get(path) == "deny"
                and all(choices.get(path, "deny") == "deny" for choices in bypasses.by_class.values())]

    def bypasses(self, v: str) -> str:
        """`webhook.core.bypasses.paths.bypass_findings`, for the paths the policy denies: the reason codes of the view's
        paths to a GPU that are not requests ([] when its namespace or service account is exempt). ``asks`` and
        ``al`` (each container's accelerators, in the order of ``cs``) are bound by `facts`."""
        rules = self.rules.bypasses
        denied = set(self.denied_paths())
        if not denied:
            return "[]"
        tests: list[tuple[str, str]] = []
        if "gpu-visible-devices-env" in denied and (rules.visible_devices_env or rules.other_env):
            value = "cel.bind(ev, e.?value.orValue(''), type(ev) == string ? ev : '')"
            tokens = "ev.split(',').exists(t, t.trim() != '')"
            none = "ev.split(',').exists(t, t.trim() in ['void', 'none'])"
            device = (f"(has(e.valueFrom) || cel.bind(ev, {value}, ev.contains('$(') || ({tokens} && "
                      f"(e.name in {cel_list(rules.other_env)} || !({none})))))")
            names = cel_list([*rules.visible_devices_env, *rules.other_env])
            tests.append(("gpu-visible-devices-env",
                          f"{v}.cs.exists(c, type(c) == map && cel.bind(el, c.?env.orValue([]), type(el) == list && "
                          f"el.exists(e, type(e) == map && e.?name.orValue('') in {names} && {device})))"))
        if "gpu-runtime-class" in denied and rules.runtime_classes:
            tests.append(("gpu-runtime-class", f"({v}.rc in {cel_list(rules.runtime_classes)} && !asks && !{v}.c)"))
        if "gpu-privileged" in denied:
            tests.append(("gpu-privileged", f"{v}.cs.exists(i, c, type(c) == map && "
                                            f"c.?securityContext.?privileged.orValue(false) == true && i < size(al) && "
                                            f"size(al[i]) > 0)"))
        if "privileged-sees-gpus" in denied:
            tests.append(("privileged-sees-gpus", f"{v}.cs.exists(i, c, type(c) == map && "
                                                  f"c.?securityContext.?privileged.orValue(false) == true && "
                                                  f"(i >= size(al) || size(al[i]) == 0))"))
        if "gpu-cdi-annotation" in denied and rules.annotation_prefixes:
            prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in rules.annotation_prefixes)
            tests.append(("gpu-cdi-annotation", f"{v}.a.exists(m, type(m) == map && m.exists(k, {prefixes}))"))
        if "gpu-device-request-mount" in denied and rules.device_request_mounts is not None:
            regex = cel_string(rules.device_request_mounts.pattern)
            tests.append(("gpu-device-request-mount",
                          f"{v}.cs.exists(c, type(c) == map && cel.bind(vm, c.?volumeMounts.orValue([]), "
                          f"type(vm) == list && vm.exists(m, type(m) == map && "
                          f"cel.bind(mp, m.?mountPath.orValue(''), type(mp) == string && mp.matches({regex})))))"))
        if "gpu-host-device" in denied and rules.host_device_paths:
            matched = " || ".join(f"hp.matches({cel_string(p.pattern)})" for p in rules.host_device_paths)
            tests.append(("gpu-host-device", f"(type({v}.vols) == list && {v}.vols.exists(vol, type(vol) == map && "
                                             f"cel.bind(hp, vol.?hostPath.?path.orValue(''), "
                                             f"type(hp) == string && ({matched}))))"))
        pairs = cel_list(f"{a.namespace}/{a.name}" for a in rules.exempt_service_accounts)
        # request.namespace is absent (not empty) for a cluster-scoped object: a runtime's templates, say
        namespace = "request.?namespace.orValue('')"
        exempt = (f"{namespace} in {cel_list(rules.exempt_namespaces)} || "
                  f"(type({v}.sa) == string && ({namespace} + '/' + {v}.sa) in {pairs})")
        found = " + ".join(f"({test} ? [{cel_string(code)}] : [])" for code, test in tests) or "[]"
        return f"(({exempt}) ? [] : {found})"


def _anchored(pattern: str) -> str:
    """Python's ``re.match`` anchors at the start; CEL's ``matches`` finds a match anywhere."""
    return pattern if pattern.startswith("^") else f"^(?:{pattern})"


# -- the policy and its bindings -------------------------------------------------------------------------------

def _split_call(text: str, start: int) -> tuple[list[str], int]:
    """The comma-separated arguments of the call whose ``(`` is at ``start``, and the index after its ``)``."""
    args: list[str] = []
    depth = 0
    quote = ""
    begin = start + 1
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[begin:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(text[begin:i])
            begin = i + 1
        i += 1
    raise ValueError("unbalanced CEL")


def without_bind(expression: str) -> str:
    """``cel.bind(x, init, body)`` as ``[dyn(init)].map(x, body)[0]``: the admission environment has no
    ``cel.bind`` (the expressions here are written with it for readability); a one-element map binds the same
    name once, as dyn, since the values come from objects of any shape."""
    at = expression.find("cel.bind(")
    while at >= 0:
        args, end = _split_call(expression, at + len("cel.bind"))
        name, init, body = (a.strip() for a in args)
        replaced = f"[dyn({without_bind(init)})].map({name}, {without_bind(body)})[0]"
        expression = expression[:at] + replaced + expression[end:]
        at = expression.find("cel.bind(", at + len(replaced))
    return expression


def _pod_views(cel: Cel) -> str:
    """The one view of each subject that is a pod."""
    pod = cel.view("'pod'", ["o.?metadata.?annotations.orValue({})"], "o.?spec.orValue({})")
    return f"variables.subjects.map(o, [{pod}])"


def _kind_variable(group: str, kind: str) -> str:
    return "of_" + re.sub(r"[^A-Za-z0-9]", "_", f"{group}_{kind}")


def _template_variables(cel: Cel, scope: str | None) -> list[dict[str, str]]:
    """The views of the subjects (``variables.views``: a list of views per subject), read kind by kind.

    Each kind's reader is a variable of its own, which the API server evaluates only when it is read (for the
    request's kind, or an Experiment's trial's). The API server's CEL type checker takes time quadratic in the size
    of one expression: all kinds' readers in one expression took 10 s to compile on a v1.36 API server, one
    variable per kind under 0.3 s in all, and a policy is not enforced before it is compiled.

    ``roots``: what is read, the subjects themselves, or for a Katib Experiment their trial specs, each read as the
    object of its own kind (``kinds``: ``group/Kind`` of each root) with paths under the trial's.
    """
    readable = [key for key in readable_kinds() if key != EXPERIMENT]
    variables = [
        {"name": "trials", "expression": f"variables.resource == {cel_string(EXPERIMENT[0] + '/experiments')}"},
        {"name": "roots",
         "expression": without_bind(f"variables.trials ? variables.subjects.map(o, {_trial('o')}) : variables.subjects")},
        {"name": "kinds",
         "expression": without_bind(f"variables.trials ? variables.roots.map(tr, {_group('tr')} + '/' + "
                                    f"string(tr.?kind.orValue(''))) : "
                                    f"variables.subjects.map(o, request.kind.group + '/' + request.kind.kind)")},
    ]
    chain = []
    for group, kind in sorted(readable):
        views = cel.kind_views(group, kind, "o")
        assert views is not None
        name = _kind_variable(group, kind)
        variables.append({"name": name, "expression": without_bind(f"variables.roots.map(o, {views})")})
        chain.append(f"k == {cel_string(group + '/' + kind)} ? variables.{name}[i]")
    # one kind a line: a reviewer reads the policy kind by kind
    found = "variables.kinds.transformList(i, k,\n  " + "\n  : ".join(chain) + "\n  : [])"
    prefixed = f"vs.map(v, {{'p': dyn({cel_string(TRIAL_PREFIX)} + v.p), 'a': v.a, 's': v.s}})"
    views = f"{found}.map(vs, variables.trials ? {prefixed} : vs)"
    if scope is None:
        views = f"variables.resource == '/pods' ? {_pod_views(cel)} : ({views})"
    return [*variables, {"name": "views", "expression": without_bind(views)}]


def _view_variables(cel: Cel, scope: str | None) -> list[dict[str, str]]:
    if scope == PODS:
        return [{"name": "views", "expression": without_bind(_pod_views(cel))}]
    return _template_variables(cel, scope)


def readable_kinds() -> list[tuple[str, str]]:
    """(group, kind) of the kinds whose templates the policy reads (the others are left to the webhook); an
    Experiment's, through its trial's kind."""
    return [key for key in KINDS if key == EXPERIMENT or key in EXPANDED or KINDS[key].sites]


def _resource_rules(scope: str | None = None) -> list[dict[str, Any]]:
    by_scope: dict[tuple[str, str], list[str]] = {}
    for group, kind in readable_kinds():
        entry = KINDS[(group, kind)]
        resources = by_scope.setdefault((group, entry.scope), [])
        if entry.resource not in resources:
            resources.append(entry.resource)
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
              "scope": "Namespaced"}] if scope in (None, PODS) else []
    if scope == PODS:
        return rules
    rules += [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
               "resources": sorted(resources), "scope": scope}
              for (group, scope), resources in sorted(by_scope.items())]
    return rules


PLAIN_SUFFIXES = ("Mi", "Gi", "Ti")
# a gpu-memory annotation any reader takes as a positive quantity
PLAIN_MEMORY = f"^[1-9][0-9]{{0,6}}({'|'.join(PLAIN_SUFFIXES)})$"


def pod_containers(test: str) -> str:
    """``test`` holds for each container of the pod, app and init (``c``)."""
    return f"(object.spec.containers + object.spec.?initContainers.orValue([])).all(c, {test})"


def plainly_clear(rules: Rules) -> str:
    """No path to a GPU but a request, in a created pod, tested plainly (a superset of what the bypass checks look
    at, `webhook.core.bypasses.paths`): no device env (whatever its value), no env from a source admission cannot
    read, nothing privileged, no DeviceClass's extended resource (the webhook warns of one it does not know), no
    hostPath, no mount where the toolkit puts device requests, no device annotation, no GPU RuntimeClass."""
    bypasses = rules.bypasses
    env = [*bypasses.visible_devices_env, *bypasses.other_env]
    device_class = cel_string(DEVICE_CLASS_RESOURCE_PREFIX)
    clauses = ["!has(c.envFrom) || size(c.envFrom) == 0",
               "!c.?securityContext.?privileged.orValue(false)",
               f"!c.?resources.?limits.orValue({{}}).exists(n, n.startsWith({device_class})) && "
               f"!c.?resources.?requests.orValue({{}}).exists(n, n.startsWith({device_class}))"]
    if env:
        clauses.append(f"!c.?env.orValue([]).exists(e, e.name in {cel_list(env)})")
    if bypasses.device_request_mounts is not None:
        clauses.append(f"!c.?volumeMounts.orValue([]).exists(m, m.mountPath.matches("
                       f"{cel_regex(bypasses.device_request_mounts)}))")
    found = [pod_containers(" && ".join(f"({c})" for c in clauses)),
             "!object.spec.?volumes.orValue([]).exists(v, has(v.hostPath))"]
    if bypasses.annotation_prefixes:
        found.append(f"!object.metadata.?annotations.orValue({{}}).exists(k, "
                     f"{cel_list(bypasses.annotation_prefixes)}.exists(p, k.startsWith(p)))")
    if bypasses.runtime_classes:
        found.append(f"!(object.spec.?runtimeClassName.orValue('') in {cel_list(bypasses.runtime_classes)})")
    return " && ".join(found)


def plain_pod(rules: Rules) -> str:
    """A created pod the pods' rule plainly passes, tested first so the common GPU pod never reaches the views
    (measured with the API server's own validator, v1.36: the views cost the course example's pod 520 us): its
    model named by ``ai-admission.io/gpu-model`` or a nodeSelector on a model label, its memory by
    ``ai-admission.io/gpu-memory`` in whole Mi, Gi or Ti (what `Rule.names_model` and `Rule.states_memory` read
    first), and `plainly_clear`. Anything else goes through the views, as before."""
    notes = "object.metadata.?annotations.orValue({})"
    named = (f"({notes}[?{cel_string(names.GPU_MODEL)}].orValue('').trim() != '' || "
             f"{cel_list(rules.model_keys)}.exists(k, object.spec.?nodeSelector[?k].orValue('') != ''))")
    stated = f"{notes}[?{cel_string(names.GPU_MEMORY)}].orValue('').matches({cel_string(PLAIN_MEMORY)})"
    return f"request.resource.resource == 'pods' && {named} && {stated} && {plainly_clear(rules)}"


PODS, TEMPLATES = "pods", "templates"


def policy_name(scope: str | None) -> str:
    """The pods' policy keeps the one name the backstop had; the kinds' is named apart."""
    return f"{NAME}-{TEMPLATES}" if scope == TEMPLATES else NAME


def validating_policy(rules: Rules, scope: str | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy for ``rules``: for pods (``scope`` PODS), for the pod templates of the kinds
    (TEMPLATES), or both in one (None). Shipped as two: a pod is never judged by the kinds' part, and its policy
    stays small."""
    cel = Cel(rules)
    rule = Rule(rules)
    subject = ("(variables.resource == '/pods' ? 'pod' : object.kind + ' ' + object.metadata.?name.orValue('')) + "
               "(variables.resource == '/pods' ? '' : ' ' + {paths}.join(', '))")
    model = model_fix(rules, None)
    memory = memory_fix(rules, None)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(scope), "labels": {"app.kubernetes.io/name": "ai-admission"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": _resource_rules(scope), "matchPolicy": "Equivalent"},
            # most pods ask for no accelerator: they skip the views (the test is by name only, a superset of the
            # rule's); controllers and CRDs always go on
            "matchConditions": [{"name": "may-ask-for-accelerators",
                                 "expression": " || ".join(["request.resource.resource != 'pods'",
                                                            accelerator_clause(rules),
                                                            *share_annotation_clause(rules),
                                                            *(bypass_clauses(rules) if rule.denied_paths() else [])])}],
            "variables": [
                *([{"name": "plain", "expression": plain_pod(rules)}] if scope == PODS else []),
                {"name": "resource", "expression": "request.resource.group + '/' + request.resource.resource"},
                {"name": "subjects",
                 "expression": "request.operation == 'UPDATE' && oldObject != null ? [object, oldObject] : [object]"},
                *_view_variables(cel, scope),
                # on UPDATE a template whose facts did not change is not judged (a legacy template keeps scaling)
                {"name": "judged",
                 "expression": "variables.views[0].filter(v, size(variables.views) < 2 || "
                               "!variables.views[1].exists(w, w == v))"},
                {"name": "facts", "expression": without_bind(rule.facts("variables.judged"))},
                {"name": "noModel", "expression": "variables.facts.filter(f, f.asks && !f.model).map(f, f.p)"},
                {"name": "noMemory", "expression": "variables.facts.filter(f, f.asks && !f.memory).map(f, f.p)"},
                {"name": "bypassed", "expression": "variables.facts.filter(f, size(f.bypass) > 0)"},
            ],
            # one validation: the API server reports only the first that fails, and each part names its own
            "validations": [{
                "expression": ("variables.plain || " if scope == PODS else "") +
                              "size(variables.noModel) == 0 && size(variables.noMemory) == 0 && "
                              "size(variables.bypassed) == 0",
                "reason": "Forbidden",
                "message": f"a pod or pod template asks for GPUs but does not say which model ({model}) or how "
                           f"much GPU memory it needs ({memory}), or reaches GPUs without asking for them",
                "messageExpression": "[" + ", ".join([
                    f"size(variables.noModel) > 0 ? {subject.format(paths='variables.noModel')} + "
                    f"' asks for GPUs but does not say which model: ' + {cel_string(model)} : ''",
                    f"size(variables.noMemory) > 0 ? {subject.format(paths='variables.noMemory')} + "
                    f"' asks for GPUs but does not say how much GPU memory it needs: ' + {cel_string(memory)} : ''",
                    f"size(variables.bypassed) > 0 ? {subject.format(paths='variables.bypassed.map(f, f.p)')} + "
                    f"' reaches GPUs without asking for them (' + "
                    f"variables.bypassed.map(f, f.bypass.join(', ')).join(' | ') + '): remove that and ask for the GPU "
                    f"in resources with its model and memory' : ''",
                ]) + "].filter(part, part != '').join('; ')",
            }],
        },
    }


_NAMESPACED = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"],
                "scope": "Namespaced"}]


def bindings(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None,
             policy: str = NAME) -> list[dict[str, Any]]:
    """One binding per way a namespace gets its mode, as the webhooks resolve it: the ``ai-admission.io/mode``
    label (warn, audit), else the rules' namespace map, else their default. Cluster-scoped kinds take the
    default. ``namespace_expressions`` narrow every binding (tests bind one namespace at a time)."""
    extra = list(namespace_expressions or [])
    found = []

    def bind(name: str, mode: str, expressions: list[dict[str, Any]], namespaced_only: bool) -> None:
        match: dict[str, Any] = {"namespaceSelector": {"matchExpressions": [*expressions, *extra]}}
        if namespaced_only:
            match["resourceRules"] = _NAMESPACED
        found.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                      "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "ai-admission"}},
                      "spec": {"policyName": policy, "validationActions": ACTIONS[mode], "matchResources": match}})

    unlabelled = {"key": MODE_LABEL, "operator": "NotIn", "values": ["warn", "audit"]}
    for mode in MODES:
        mapped = sorted(ns for ns, m in rules.namespace_modes.items() if m == mode)
        others = sorted(ns for ns, m in rules.namespace_modes.items() if m != mode)
        if mode == rules.default_mode:
            excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": [*EXCLUDED_NAMESPACES, *others]}
            bind(f"{policy}-{mode}", mode, [excluded, unlabelled], namespaced_only=False)
        elif mapped:
            bind(f"{policy}-{mode}", mode, [excluded_namespaces(), unlabelled,
                                           {"key": "kubernetes.io/metadata.name", "operator": "In", "values": mapped}],
                 namespaced_only=True)
        if mode != "deny":
            bind(f"{policy}-{mode}-label", mode, [excluded_namespaces(), {"key": MODE_LABEL, "operator": "In", "values": [mode]}],
                 namespaced_only=True)
    return found


def manifests(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The two policies (pods, and the kinds' templates) and their bindings, as `ai-admission manifests policy`
    prints them."""
    return [validating_policy(rules, PODS), validating_policy(rules, TEMPLATES),
            *bindings(rules, namespace_expressions), *bindings(rules, namespace_expressions, policy_name(TEMPLATES))]


# -- the GPU toleration as a MutatingAdmissionPolicy -----------------------------------------------------------

TOLERATIONS = "ai-admission-gpu-tolerations"


# the whole list again, with the missing ones added (``variables.missing``: each [key, operator, value, effect])
TOLERATIONS_PATCH = ("size(variables.missing) == 0 ? [] : [JSONPatch{op: 'add', path: '/spec/tolerations', "
                     "value: object.spec.?tolerations.orValue([]) + variables.missing.map(t, "
                     "Object.spec.tolerations{key: t[0], operator: t[1], value: t[2], effect: t[3]})}]")


def missing_tolerations(wanted: str) -> str:
    """The tolerations of ``wanted`` (a CEL list of [key, operator, value, effect]) that no toleration of the pod
    covers (`webhook.core.mutate._covers`)."""
    covers = ("object.spec.?tolerations.orValue([]).exists(e, "
              "(e.?effect.orValue('') == '' || e.?effect.orValue('') == w[3]) && "
              "(e.?operator.orValue('') == 'Exists' ? (e.?key.orValue('') == '' || e.?key.orValue('') == w[0]) : "
              "(e.?key.orValue('') == w[0] && e.?value.orValue('') == w[2] && w[1] == 'Equal')))")
    return f"({wanted}).filter(w, !{covers})"


# the toleration of each accelerator the pod asks for (``variables.asked``), as the webhook gives it with no node watch
PER_ACCELERATOR = "variables.asked.map(n, [string(n), 'Exists', '', 'NoSchedule'])"


def toleration_variables(rules: Rules) -> list[dict[str, str]]:
    """``asked``: the accelerators the pod's containers ask for, each once; ``missing``: the ``Exists``/
    ``NoSchedule`` toleration of each that no toleration of the pod covers (`missing_tolerations`)."""
    rule = Rule(rules)
    containers = "object.spec.containers + object.spec.?initContainers.orValue([])"
    # each container's accelerators, flattened through a string (names hold no comma) and each kept once
    names = (f"[dyn(({containers}).map(c, {rule.asked('c.?resources.orValue({})')}.join(',')).join(',')"
             f".split(','))].map(all, all.transformList(i, n, n != '' && all.indexOf(n) == i, n))[0]")
    return [{"name": "asked", "expression": without_bind(names)},
            {"name": "missing", "expression": missing_tolerations(PER_ACCELERATOR)}]


def toleration_policy(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None, *,
                      name: str = TOLERATIONS, unless: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36+) and its binding that give a
    pod the toleration of each accelerator resource it asks for, as `webhook.core.mutate.add_tolerations` does (key:
    the resource, ``Exists``, ``NoSchedule``; not when a toleration the pod has already covers it), so that pods
    created while the webhook is down still reach tainted GPU nodes. The class's own pool tolerations and a DRA
    claim's device-class taint stay the webhook's. Empty when the rules add no GPU tolerations. ``unless``: one
    more match condition, for the pods another policy gives their tolerations (the native set's class policies)."""
    if not rules.mutation.gpu_tolerations:
        return []
    labels = {"app.kubernetes.io/name": "ai-admission"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Ignore",  # a toleration is a convenience; the webhook adds it again when it is up
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}],
                                 "matchPolicy": "Equivalent"},
            "matchConditions": [*([unless] if unless else []),
                                {"name": "may-ask-for-accelerators", "expression": accelerator_clause(rules)}],
            "variables": toleration_variables(rules),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": TOLERATIONS_PATCH}}],
        },
    }
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": labels},
               "spec": {"policyName": name,
                        "matchResources": {"namespaceSelector": {
                            "matchExpressions": [excluded_namespaces(), *(namespace_expressions or [])]}}}}
    return [policy, binding]
