"""Paths to a GPU that are not requests (`webhook.core.bypasses.paths`), in three precisions written from the same
``bypasses`` block of the rules:

- `may_take_a_path` (a superset, one clause per path): a device variable in an env, env from a ConfigMap or
  Secret that may hold one, a GPU RuntimeClass, privileged, a CDI annotation, a device-request mount, any hostPath,
  a DeviceClass's implicit resource; the webhooks' ``matchConditions`` send such a pod;
- `codes_in_view` (exact, for the paths the backstop denies): the reason codes of a view's paths, as
  `bypass_findings` finds them;
- `plainly_clear` (a subset): none of what the bypass checks look at, tested plainly; the backstop's fast pass
  and the native judgement.
"""

from __future__ import annotations

from webhook.core.bypasses.rules import PATHS as BYPASS_PATHS
from webhook.core.rules import Rules

from .precision import POD, Subset, Superset, mirrored
from .resources import ALL_CONTAINERS, asks_for_device_class_resource
from .text import cel_list, cel_regex, cel_string


def may_take_a_path(rules: Rules) -> list[Superset]:
    """One clause per path a pod may take to a GPU without asking for one (none where the checks are off)."""
    bypasses = rules.bypasses
    if not bypasses.enabled:
        return []
    clauses = []
    env = [*bypasses.visible_devices_env, *bypasses.other_env]
    if env:
        clauses.append(f"{ALL_CONTAINERS}.exists(c, has(c.env) && c.env.exists(e, e.name in {cel_list(env)}))")
    if bypasses.visible_devices_env:  # a ConfigMap's or Secret's keys may name it: /mutate voids it (env_sources)
        clauses.append(f"{ALL_CONTAINERS}.exists(c, has(c.envFrom) && c.envFrom.exists(f, has(f.configMapRef) || "
                       f"has(f.secretRef)))")
    if bypasses.runtime_classes:
        clauses.append(f"has(object.spec.runtimeClassName) && object.spec.runtimeClassName in "
                       f"{cel_list(bypasses.runtime_classes)}")
    clauses.append(f"{ALL_CONTAINERS}.exists(c, has(c.securityContext) && has(c.securityContext.privileged) && "
                   f"c.securityContext.privileged)")
    if bypasses.annotation_prefixes:
        prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in bypasses.annotation_prefixes)
        clauses.append(f"has(object.metadata.annotations) && object.metadata.annotations.exists(k, {prefixes})")
    if bypasses.device_request_mounts is not None:
        clauses.append(f"{ALL_CONTAINERS}.exists(c, has(c.volumeMounts) && c.volumeMounts.exists(m, "
                       f"m.mountPath.matches({cel_regex(bypasses.device_request_mounts)})))")
    if bypasses.host_device_paths:
        clauses.append("has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.hostPath))")
    clauses.append(asks_for_device_class_resource(rules))
    return [Superset(c) for c in clauses]


def denied_paths(rules: Rules) -> list[str]:
    """The reason codes of the paths the backstop can deny: denied by default and by every class (a class that
    only warns of one is the webhook's to tell)."""
    bypasses = rules.bypasses
    return [code for path, code in BYPASS_PATHS.items()
            if bypasses.actions.get(path) == "deny"
            and all(choices.get(path, "deny") == "deny" for choices in bypasses.by_class.values())]


def codes_in_view(rules: Rules, v: str) -> str:
    """`bypass_findings`, for the paths the backstop denies: the reason codes of the view's paths to a GPU that
    are not requests ([] when its namespace or service account is exempt). ``asks`` (the view asks for GPUs) and
    ``us`` (each container of ``v.cs`` asks for an accelerator, or names one with a malformed amount) are bound by
    the backstop (`webhook.generate.backstop.fact_variables`)."""
    bypasses = rules.bypasses
    denied = set(denied_paths(rules))
    if not denied:
        return "[]"
    tests: list[tuple[str, str]] = []
    if "gpu-visible-devices-env" in denied and (bypasses.visible_devices_env or bypasses.other_env):
        value = "cel.bind(ev, e.?value.orValue(''), type(ev) == string ? ev : '')"
        tokens = "ev.split(',').exists(t, t.trim() != '')"
        none = "ev.split(',').exists(t, t.trim() in ['void', 'none'])"
        device = (f"(has(e.valueFrom) || cel.bind(ev, {value}, ev.contains('$(') || ({tokens} && "
                  f"(e.name in {cel_list(bypasses.other_env)} || !({none})))))")
        names = cel_list([*bypasses.visible_devices_env, *bypasses.other_env])
        tests.append(("gpu-visible-devices-env",
                      f"{v}.cs.exists(c, type(c) == map && cel.bind(el, c.?env.orValue([]), type(el) == list && "
                      f"el.exists(e, type(e) == map && e.?name.orValue('') in {names} && {device})))"))
    if "gpu-runtime-class" in denied and bypasses.runtime_classes:
        tests.append(("gpu-runtime-class", f"({v}.rc in {cel_list(bypasses.runtime_classes)} && !asks && !{v}.c)"))
    privileged = f"type({v}.cs[i]) == map && {v}.cs[i].?securityContext.?privileged.orValue(false) == true"
    if "gpu-privileged" in denied:
        tests.append(("gpu-privileged", f"lists.range(size({v}.cs)).exists(i, {privileged} && i < size(us) && us[i])"))
    if "privileged-sees-gpus" in denied:
        tests.append(("privileged-sees-gpus", f"lists.range(size({v}.cs)).exists(i, {privileged} && "
                                              f"(i >= size(us) || !us[i]))"))
    if "gpu-cdi-annotation" in denied and bypasses.annotation_prefixes:
        prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in bypasses.annotation_prefixes)
        tests.append(("gpu-cdi-annotation", f"{v}.a.exists(m, type(m) == map && m.exists(k, {prefixes}))"))
    if "gpu-device-request-mount" in denied and bypasses.device_request_mounts is not None:
        regex = cel_string(bypasses.device_request_mounts.pattern)
        tests.append(("gpu-device-request-mount",
                      f"{v}.cs.exists(c, type(c) == map && cel.bind(vm, c.?volumeMounts.orValue([]), "
                      f"type(vm) == list && vm.exists(m, type(m) == map && "
                      f"cel.bind(mp, m.?mountPath.orValue(''), type(mp) == string && mp.matches({regex})))))"))
    if "gpu-host-device" in denied and bypasses.host_device_paths:
        matched = " || ".join(f"hp.matches({cel_string(p.pattern)})" for p in bypasses.host_device_paths)
        tests.append(("gpu-host-device", f"(type({v}.vols) == list && {v}.vols.exists(vol, type(vol) == map && "
                                         f"cel.bind(hp, vol.?hostPath.?path.orValue(''), "
                                         f"type(hp) == string && ({matched}))))"))
    pairs = cel_list(f"{a.namespace}/{a.name}" for a in bypasses.exempt_service_accounts)
    # request.namespace is absent (not empty) for a cluster-scoped object: a runtime's templates, say
    namespace = "request.?namespace.orValue('')"
    exempt = (f"{namespace} in {cel_list(bypasses.exempt_namespaces)} || "
              f"(type({v}.sa) == string && ({namespace} + '/' + {v}.sa) in {pairs})")
    if not tests:
        return "[]"
    # a list of [code, found] pairs, not a chain of "+": an evaluator's parser has a depth
    found = "[" + ", ".join(f"[dyn({cel_string(code)}), dyn({test})]" for code, test in tests) + "]"
    return f"(({exempt}) ? [] : {found}.filter(pf, pf[1]).map(pf, pf[0]))"


def pod_containers(test: str) -> str:
    """``test`` holds for each container of the pod, app and init (``c``)."""
    return f"{ALL_CONTAINERS}.all(c, {test})"


def _bypass_free(pod: dict, rules: Rules) -> bool:
    from webhook.core.bypasses.paths import bypass_findings
    from webhook.core.context import Context
    from webhook.core.profile import build_profile

    if not rules.bypasses.enabled:
        return True
    offline = Context(rules)
    return not bypass_findings(pod, build_profile(pod, offline), offline, "ml-team")


@mirrored(POD, _bypass_free)
def plainly_clear(rules: Rules) -> Subset:
    """No path to a GPU but a request, tested plainly (a superset of what the bypass checks look at): no device
    env (whatever its value), no env from a source admission cannot read, nothing privileged, no DeviceClass's
    extended resource (the webhook warns of one it does not know), no hostPath, no mount where the toolkit puts
    device requests, no device annotation, no GPU RuntimeClass."""
    bypasses = rules.bypasses
    env = [*bypasses.visible_devices_env, *bypasses.other_env]
    clauses = ["!has(c.envFrom) || size(c.envFrom) == 0",
               "!c.?securityContext.?privileged.orValue(false)"]
    if env:
        clauses.append(f"!c.?env.orValue([]).exists(e, e.name in {cel_list(env)})")
    if bypasses.device_request_mounts is not None:
        clauses.append(f"!c.?volumeMounts.orValue([]).exists(m, m.mountPath.matches("
                       f"{cel_regex(bypasses.device_request_mounts)}))")
    found = [pod_containers(" && ".join(f"({c})" for c in clauses)), f"!({asks_for_device_class_resource(rules)})",
             "!object.spec.?volumes.orValue([]).exists(v, has(v.hostPath))"]
    if bypasses.annotation_prefixes:
        prefixes = " || ".join(f"k.startsWith({cel_string(p)})" for p in sorted(bypasses.annotation_prefixes))
        found.append(f"!object.metadata.?annotations.orValue({{}}).exists(k, {prefixes})")
    if bypasses.runtime_classes:
        found.append(f"!(object.spec.?runtimeClassName.orValue('') in {cel_list(bypasses.runtime_classes)})")
    return Subset(" && ".join(found))
