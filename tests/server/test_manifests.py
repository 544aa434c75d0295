"""manifests/: renders with kustomize, every object is schema-valid, and it agrees with the code it deploys."""

from __future__ import annotations

from typing import Any

from tests.conftest import Server
from tests.support.builders import find
from tests.support.reviews import admission_review


def test_webhooks_point_at_paths_the_app_serves(base: list[dict[str, Any]], server: Server) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in find(base, kind)["webhooks"]:
            service = webhook["clientConfig"]["service"]
            assert (service["name"], service["namespace"], service["port"]) == ("ai-admission", "ai-admission", 443)
            review = admission_review(pod)
            assert server.review(service["path"], review)["allowed"] is True
    service = find(base, "Service", "ai-admission")
    assert service["spec"]["ports"][0]["port"] == 443
