"""The ``bypasses:`` block of the rules: the ways to reach a GPU without asking for one, and what each gets.

A pod can get GPUs without an accelerator resource: an ``NVIDIA_VISIBLE_DEVICES`` value the NVIDIA container
runtime honours, the ``nvidia`` RuntimeClass (whose runtime honours the image's own ``NVIDIA_VISIBLE_DEVICES=all``),
``privileged: true`` (every device of the node), CDI and NRI annotations, the toolkit's device-request mounts,
hostPath mounts of device nodes and CDI specs. Which paths exist, what names they go by and which namespaces GPU
infrastructure runs in are facts about the drivers and the platform, so they are rules; each path's action
(``deny``, ``warn`` or ``off``) is a default a class may change. Compiled once here, like the rest of the rules
(`webhook.core.bypasses.paths` applies them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

# The paths, in the order findings are given; each is a key of ``actions`` and names its reason code.
PATHS: dict[str, str] = {
    "visibleDevicesEnv": "gpu-visible-devices-env",
    "runtimeClass": "gpu-runtime-class",
    "privilegedWithGpu": "gpu-privileged",
    "privileged": "privileged-sees-gpus",
    "cdiAnnotations": "gpu-cdi-annotation",
    "deviceRequestMounts": "gpu-device-request-mount",
    "hostDevices": "gpu-host-device",
    "unknownDeviceClass": "device-class-unknown",
}
ACTIONS = ("deny", "warn", "off")


@dataclass(frozen=True)
class ServiceAccount:
    namespace: str
    name: str


@dataclass(frozen=True)
class BypassRules:
    """The compiled ``bypasses:`` block; ``actions`` is the default, ``by_class`` a class's own choices."""

    actions: Mapping[str, str] = field(default_factory=dict)            # path -> deny | warn | off
    by_class: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    visible_devices_env: tuple[str, ...] = ()     # void, none and empty mean no GPU (the NVIDIA toolkit)
    other_env: tuple[str, ...] = ()               # any value is a device request
    runtime_classes: frozenset[str] = frozenset()
    annotation_prefixes: tuple[str, ...] = ()
    device_request_mounts: re.Pattern[str] | None = None
    host_device_paths: tuple[re.Pattern[str], ...] = ()
    void_visible_devices: bool = False
    void_by_class: Mapping[str, bool] = field(default_factory=dict)
    exempt_namespaces: frozenset[str] = frozenset()
    exempt_service_accounts: frozenset[ServiceAccount] = frozenset()

    def action(self, path: str, workload: str) -> str:
        """What ``path`` gets for a pod of class ``workload`` (``none`` and unknown classes: the default)."""
        return self.by_class.get(workload, {}).get(path) or self.actions.get(path, "off")

    def voids(self, workload: str) -> bool:
        return self.void_by_class.get(workload, self.void_visible_devices)

    def exempt(self, namespace: str, service_account: Any) -> bool:
        """GPU infrastructure's namespaces (and service accounts the rules name) may use every path.
        ``service_account`` is the pod's ``serviceAccountName`` as received (anything; unset is ``default``)."""
        if namespace in self.exempt_namespaces:
            return True
        if not self.exempt_service_accounts:
            return False
        name = service_account if isinstance(service_account, str) and service_account else "default"
        return ServiceAccount(namespace, name) in self.exempt_service_accounts

    @property
    def enabled(self) -> bool:
        return any(a != "off" for a in self.actions.values()) or any(
            a != "off" for choices in self.by_class.values() for a in choices.values())


def compile_bypasses(spec: Mapping[str, Any] | None, classes: Mapping[str, Any]) -> BypassRules:
    """``spec`` is the schema-checked block; ``classes`` the rules' classes, each with its own ``bypasses``."""
    if not spec:
        return BypassRules()
    env = spec.get("visibleDevicesEnv") or {}
    exempt = spec.get("exempt") or {}
    by_class: dict[str, dict[str, str]] = {}
    void_by_class: dict[str, bool] = {}
    for name, policy in classes.items():
        own = dict((policy or {}).get("bypasses") or {})
        if "voidVisibleDevices" in own:
            void_by_class[name] = bool(own.pop("voidVisibleDevices"))
        if own:
            by_class[name] = own
    mounts = spec.get("deviceRequestMounts")
    return BypassRules(
        actions=dict(spec.get("actions") or {}), by_class=by_class,
        visible_devices_env=tuple(env.get("names") or ()), other_env=tuple(env.get("otherNames") or ()),
        runtime_classes=frozenset(spec.get("runtimeClasses") or ()),
        annotation_prefixes=tuple(spec.get("annotationPrefixes") or ()),
        device_request_mounts=re.compile(mounts) if mounts else None,
        host_device_paths=tuple(re.compile(p) for p in spec.get("hostDevicePaths") or ()),
        void_visible_devices=bool(spec.get("voidVisibleDevices", False)), void_by_class=void_by_class,
        exempt_namespaces=frozenset(exempt.get("namespaces") or ()),
        exempt_service_accounts=frozenset(ServiceAccount(s["namespace"], s["name"])
                                          for s in exempt.get("serviceAccounts") or ()),
    )
