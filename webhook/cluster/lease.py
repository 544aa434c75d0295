"""One writer among the replicas of the Deployment: a ``coordination.k8s.io/v1`` Lease, as Kubernetes' own
controllers elect their leader (client-go's leaderelection, in its simplest form).

The holder renews the Lease at each of its polls; another replica takes it over once it has not been renewed for
``duration`` seconds (a holder that died or lost the API server). A conflict (two replicas at once) is a loss for
the one whose write the API server refused: it tries again at its next poll.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from . import client as kube

GROUP, VERSION = "coordination.k8s.io", "v1"


def micro_time(seconds: float) -> str:
    """A Lease's MicroTime (RFC 3339, microseconds, UTC)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(text: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def renewed_lately(lease: Any, now: float) -> bool:
    """Whether someone holds ``lease`` (a Lease object, or None) and renewed it within its duration: its holder is
    at work."""
    spec = (lease or {}).get("spec") or {}
    renewed = _seconds(spec.get("renewTime"))
    return bool(spec.get("holderIdentity")) and renewed is not None and \
        renewed + float(spec.get("leaseDurationSeconds") or 0) >= now


class Lease:
    """`held`: whether ``identity`` holds the Lease ``name`` in ``namespace`` now (taking or renewing it)."""

    def __init__(self, namespace: str, name: str, identity: str, *, duration: float,
                 clock: Callable[[], float]) -> None:
        self.path = f"{kube.collection(GROUP, VERSION, 'leases', namespace)}/{name}"
        self._namespace, self._name, self._identity = namespace, name, identity
        self._duration = duration
        self._clock = clock

    def held(self, api: Any) -> bool:
        now = self._clock()
        current = kube.get(api, self.path)
        spec = (current or {}).get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _seconds(spec.get("renewTime"))
        lapsed = renewed is None or renewed + float(spec.get("leaseDurationSeconds") or 0) < now
        if current is not None and holder != self._identity and holder and not lapsed:
            return False
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace,
                             **({"resourceVersion": current["metadata"]["resourceVersion"]} if current else {})},
                "spec": {"holderIdentity": self._identity, "leaseDurationSeconds": int(self._duration),
                         "acquireTime": spec.get("acquireTime") if holder == self._identity else micro_time(now),
                         "renewTime": micro_time(now),
                         "leaseTransitions": int(spec.get("leaseTransitions") or 0) + bool(holder and
                                                                                       holder != self._identity)}}
        try:
            if current is None:
                kube.request(api, "POST", self.path.rsplit("/", 1)[0], body=body)
            else:
                kube.request(api, "PUT", self.path, body=body)
        except kube.KubeError as exc:
            if exc.status == 409:  # another replica wrote first
                return False
            raise
        return True
