"""Pod templates of controllers and AI CRDs, each turned into the pod its controller will create.

A Deployment or PyTorchJob is never seen by a pod webhook at ``kubectl apply --dry-run=server`` time, so its
templates are judged here. Like Kyverno's autogen, each template becomes the pod it will produce (the owner
kind and labels the controller adds, the env a framework plugin injects), and that pod goes through the one
policy path: no second copy of the policy for templates. Which kinds exist, where their templates sit and what
their controllers add is data (`webhook.core.workloads.kinds`, one entry per kind); this module walks that data.

A distributed job's templates also say how many pods the job has (replica counts), which the pods themselves
learn only from their operator's env once created: each template carries its job's world size, so a model
sharded over the whole job is judged as such. Any other kind is read by `webhook.core.workloads.generic`, by shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from .. import podview
from ..context import Context
from .parallelism import World

PodTemplate = Mapping[str, Any]
Resolver = Callable[[str, str, str], "Mapping[str, Any] | None"]  # (kind, name, namespace) -> object, if known

TEMPLATE = "template"   # the site holds a PodTemplateSpec
POD_SPEC = "podspec"    # the site holds a bare PodSpec (its metadata comes from elsewhere)
BUILT = "built"         # the site's pod spec is assembled from the kind's own fields by a builder

TABLE_READER = "kinds table"


@dataclass
class Template:
    """One pod template: where it sits in the object, and the pod it stands for."""

    path: str
    pod: dict[str, Any]
    template: PodTemplate
    world: World | None = None          # the pods of the job this template's pods belong to, when several
    notes: tuple[str, ...] = ()         # what the reader of the verdict should know about how it was read
    reader: str = TABLE_READER          # what found it: the kinds table, or the generic reader and the shape
    form: str = TEMPLATE                # how the pod sits at ``path``: a pod template, a bare pod spec, or built
    replicas: int = 1                   # the pods this template makes (its replicas; 1 when it says none)

    @property
    def generic(self) -> bool:
        """Found by shape in a kind with no table entry (`webhook.core.workloads.generic`)."""
        return self.reader != TABLE_READER


@dataclass(frozen=True)
class Owner:
    """The controller owner the pods get: ``{apiVersion}`` stands for the object's own apiVersion."""

    api_version: str
    kind: str
    name: str = "{name}"


@dataclass
class Element:
    """One place in the object a site matched: the object, the element there, and how it was reached."""

    obj: Mapping[str, Any]
    value: Mapping[str, Any]
    path: str
    key: str = ""
    index: int = 0

    @property
    def name(self) -> str:
        return str(podview.metadata(self.obj).get("name", ""))

    def get(self, dotted: str) -> Any:
        return dig(self.value, dotted)


# A builder turns a site's element into a pod template (metadata + spec), or None when there is no pod there.
Builder = Callable[[Element], "dict[str, Any] | None"]
# How many pods a site's element makes, and how to say it, count included ("Worker 3"; "" for the default wording).
Counter = Callable[[Element], "tuple[int, str]"]


@dataclass(frozen=True)
class Site:
    """One place in a kind where pod specs sit, and what its controller makes of them.

    ``path`` leads from the object to the element(s): ``a.b`` descends, ``a.*`` takes every value of the map
    ``a`` (binding ``{key}``), ``a[]`` every item of the list ``a`` (binding ``{index}`` and ``{item_name}``).
    ``template`` is where the pod template (or bare pod spec) sits inside the element. ``labels``,
    ``annotations`` and ``env`` are what the controller adds, as patterns over ``{name}``, ``{key}``,
    ``{key_lower}``, ``{index}``, ``{item_name}`` and ``{world}`` (the job's pods). ``group`` names the pods
    that form one job (the world size adds up the pods of the sites of a group that ask for accelerators).
    """

    path: str
    owner: Owner | None         # None: the pods' controller is not known (a PodTemplate is used by several)
    template: str = "template"
    form: str = TEMPLATE
    build: Builder | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    pods: Counter | None = None
    group: str = "{name}"
    describe: str = "{key}"     # how the site's pods are named in the world-size text


@dataclass(frozen=True)
class Kind:
    """One kind ai-admission reads: its API group, kind, plural resource, scope, and where its pods come from.

    ``expand``, for the few kinds that are truly different (a Katib Experiment holds another kind's object),
    replaces the walk over ``sites``.
    """

    group: str
    kind: str
    resource: str
    sites: tuple[Site, ...] = ()
    scope: str = "Namespaced"
    expand: Callable[[Mapping[str, Any], Context, Resolver | None], "list[Template]"] | None = None


def dig(value: Any, dotted: str) -> Any:
    """``value`` at a dotted path of map keys (None where something is missing or not a map)."""
    for part in dotted.split(".") if dotted else ():
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _walk(value: Any, parts: list[str], path: str, element: Element) -> Iterator[Element]:
    if not parts:
        if isinstance(value, dict):
            yield Element(element.obj, value, path, element.key, element.index)
        return
    part, rest = parts[0], parts[1:]
    if part == "*":
        for key, child in podview.as_dict(value).items():
            yield from _walk(child, rest, f"{path}.{key}", Element(element.obj, {}, "", str(key), element.index))
        return
    if part.endswith("[]"):
        field_name = part[:-2]
        for index, child in enumerate(podview.as_list(podview.as_dict(value).get(field_name))):
            yield from _walk(child, rest, f"{path}.{field_name}[{index}]".lstrip("."),
                             Element(element.obj, {}, "", element.key, index))
        return
    yield from _walk(podview.as_dict(value).get(part), rest, f"{path}.{part}".lstrip("."), element)


def elements(obj: Mapping[str, Any], path: str) -> Iterator[Element]:
    """Every element of ``obj`` that ``path`` (see `Site`) leads to."""
    yield from _walk(obj, path.split("."), "", Element(obj, {}, ""))


_FIELD = re.compile(r"\{([a-z_]+)\}")


def fill(pattern: str, fields: Mapping[str, str]) -> str:
    """``pattern`` with each ``{field}`` replaced; anything else (a literal "{}", an unknown name) stays as written."""
    if "{" not in pattern:
        return pattern
    return _FIELD.sub(lambda m: fields.get(m.group(1), m.group(0)), pattern)


def _fields(element: Element, world: int) -> dict[str, str]:
    item = element.value
    return {"name": element.name, "key": element.key, "key_lower": element.key.lower(), "index": str(element.index),
            "item_name": str(item.get("name", element.index)), "world": str(world),
            "api_version": str(element.obj.get("apiVersion", ""))}


def with_env(container: Mapping[str, Any], env: Mapping[str, str], *, overwrite: bool = False) -> dict[str, Any]:
    """``container`` with the env a controller writes: a name it already sets is kept, or replaced where the
    controller ``overwrite``s it (KServe's AddEnvVarToPodSpec)."""
    present = set(podview.container_env(container))
    added = [{"name": k, "value": v} for k, v in env.items() if overwrite or k not in present]
    if not added:
        return dict(container)
    kept = [e for e in podview.as_list(container.get("env"))
            if not (overwrite and isinstance(e, dict) and e.get("name") in env)]
    return {**container, "env": [*kept, *added]}


def pod_from(obj: Mapping[str, Any], template: PodTemplate, *, owner: Owner | None, fields: Mapping[str, str],
             labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
             env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pod a controller makes from ``template``: its metadata plus what the controller adds."""
    meta = podview.metadata(obj)
    template_meta = podview.as_dict(template.get("metadata"))
    pod_labels = {**podview.string_map(template_meta.get("labels")),
                  **{k: fill(v, fields) for k, v in (labels or {}).items()}}
    pod_annotations = {**{k: fill(v, fields) for k, v in (annotations or {}).items()},
                       **podview.string_map(template_meta.get("annotations"))}
    spec = dict(podview.as_dict(template.get("spec")))
    if env:
        values = {k: fill(v, fields) for k, v in env.items()}
        spec["containers"] = [with_env(c, values) for c in podview.containers({"spec": spec})]
    metadata: dict[str, Any] = {"generateName": f"{meta.get('name', '')}-", "labels": pod_labels,
                                "annotations": pod_annotations}
    if owner is not None:
        api_version = owner.api_version.replace("{apiVersion}", str(obj.get("apiVersion", "")))
        metadata["ownerReferences"] = [{"apiVersion": api_version, "kind": owner.kind,
                                        "name": fill(owner.name, fields), "uid": "", "controller": True}]
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _template_at(site: Site, element: Element) -> tuple[dict[str, Any] | None, str]:
    """The pod template of ``element`` (as a PodTemplateSpec) and its path in the object."""
    where = f"{element.path}.{site.template}".strip(".") if site.template else element.path
    if site.form == BUILT:
        assert site.build is not None
        return site.build(element), element.path
    found = podview.as_dict(element.get(site.template) if site.template else element.value)
    if not found:
        return None, where
    if site.form == POD_SPEC:
        return {"metadata": {}, "spec": found}, where
    return found, where


def asks_for_accelerators(template: PodTemplate, ctx: Context) -> bool:
    spec = podview.as_dict(template.get("spec"))
    for kind in ("containers", "initContainers"):
        for container in podview.as_list(spec.get(kind)):
            requests, limits = podview.resources(podview.as_dict(container))
            if any(ctx.accelerators.is_accelerator(name) for name in (*requests, *limits)):
                return True
    return False


@dataclass
class _Found:
    site: Site
    element: Element
    template: dict[str, Any]
    path: str
    pods: int
    pods_text: str
    gpus: bool
    group: str


def _found(kind: Kind, obj: Mapping[str, Any], ctx: Context) -> list[_Found]:
    result: list[_Found] = []
    for site in kind.sites:
        for element in elements(obj, site.path):
            template, path = _template_at(site, element)
            if not template:
                continue
            fields = _fields(element, 1)
            pods, text = site.pods(element) if site.pods else (0, "")  # no counter: not part of a job's world
            result.append(_Found(site, element, template, path, pods, text or f"{fill(site.describe, fields)} {pods}",
                                 asks_for_accelerators(template, ctx), fill(site.group, fields)))
    return result


def _worlds(found: list[_Found], kind: str) -> dict[str, World]:
    """The world size of each group: the pods of its sites that ask for accelerators, added up."""
    worlds: dict[str, World] = {}
    for group in {f.group for f in found}:
        members = [f for f in found if f.group == group and f.gpus and f.pods > 0]
        pods = sum(f.pods for f in members)
        if pods >= 1:  # one pod too: a job of one pod talks to no other node, whatever its replica types say
            parts = " + ".join(f.pods_text for f in members)
            worlds[group] = World(pods, f"{kind} {parts}")
    return worlds


def from_sites(kind: Kind, obj: Mapping[str, Any], ctx: Context) -> list[Template]:
    """The templates of ``obj`` at the sites of ``kind``, each as the pod its controller makes."""
    found = _found(kind, obj, ctx)
    worlds = _worlds(found, kind.kind)
    templates = []
    for item in found:
        world = worlds.get(item.group)
        fields = _fields(item.element, world.pods if world else 1)
        site = item.site
        pod = pod_from(obj, item.template, owner=site.owner, fields=fields, labels=site.labels,
                       annotations=site.annotations, env=site.env)
        templates.append(Template(item.path, pod, item.template, world=world, form=site.form,
                                  replicas=max(item.pods, 1)))
    return templates
