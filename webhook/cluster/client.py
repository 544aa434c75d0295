"""The one Kubernetes client: plain JSON access to the API for the commands and background threads that read or
write the cluster (the watches, audit, PolicyReports, the certificate commands).

Objects stay the dicts the API server sends (camelCase, as in a manifest), so the admission core judges them
exactly as it judges files and admission requests; the kubernetes client library only supplies configuration,
authentication and TLS. Every `client` has a configuration of its own: nothing here changes the library's global
configuration. Nothing here runs on the request path.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

JSON = {"Accept": "application/json", "Content-Type": "application/json"}
PAGE = 500


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def client(kubeconfig: str | None = None) -> Any:
    """A new ``kubernetes.client.ApiClient``: ``kubeconfig`` when given, else in-cluster (the pod's service
    account), else ``$KUBECONFIG`` / ~/.kube/config."""
    from kubernetes import client as k8s
    from kubernetes import config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        configuration = k8s.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)
    except config.ConfigException:
        # $KUBECONFIG as it is now: the client reads it once, when it is first imported
        return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))


def context_namespace(kubeconfig: str | None = None) -> str:
    """The namespace of the kubeconfig's current context (kubectl's default for -n), else ``default``."""
    from kubernetes import config

    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    except (config.ConfigException, OSError):
        return "default"
    return str((current or {}).get("context", {}).get("namespace") or "default")


def request(api: Any, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
            timeout: float | tuple[float, float] = 30, stream: bool = False) -> Any:
    """One call; the decoded JSON body (or, with ``stream``, the urllib3 response to read). Raises `KubeError`."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    params = list((query or {}).items())
    try:
        if hasattr(api, "param_serialize"):  # kubernetes >= 35: serialise, then call; statuses are not raised
            _, url, headers, data, _ = api.param_serialize(method, path, query_params=params,
                                                            header_params=dict(JSON), body=body,
                                                            auth_settings=["BearerToken"])
            response = api.call_api(method, url, header_params=headers, body=data, _request_timeout=timeout).response
        else:  # older clients raise ApiException for an error status
            response = api.call_api(path, method, query_params=params, header_params=dict(JSON), body=body,
                                    auth_settings=["BearerToken"], _preload_content=False,
                                    _return_http_data_only=True, _request_timeout=timeout)
    except ApiException as exc:
        raise KubeError(f"{method} {path}: {exc.status} {_reason(exc.body, exc.reason)}", exc.status) from exc
    except (HTTPError, OSError) as exc:
        raise KubeError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
    if not 200 <= response.status < 300:
        raise KubeError(f"{method} {path}: {response.status} {_reason(response.data, response.reason)}",
                        response.status)
    if stream:
        return response
    return json.loads(response.data or b"null")


def _reason(body: Any, reason: Any) -> str:
    """The API's Status message when the body is one."""
    try:
        return str(json.loads(body).get("message") or reason)
    except (TypeError, ValueError, AttributeError):
        return str(reason)


def get(api: Any, path: str, **query: Any) -> Any | None:
    """The object at ``path``, or None when it does not exist (404)."""
    try:
        return request(api, "GET", path, query=query)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def list_items(api: Any, path: str, **query: Any) -> tuple[list[dict[str, Any]], str]:
    """Every item of a collection, page by page, and the list's resourceVersion (to watch from)."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        page = request(api, "GET", path, query={**query, "limit": PAGE, **({"continue": token} if token else {})})
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, str(meta.get("resourceVersion") or "")


def watch(api: Any, path: str, *, resource_version: str, timeout_seconds: int,
          query: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The watch events of a collection from ``resource_version`` (bookmarks included), until the server ends
    the watch after ``timeout_seconds``. A read that stalls longer than that raises `KubeError`."""
    from kubernetes.watch.watch import iter_resp_lines
    from urllib3.exceptions import HTTPError

    response = request(api, "GET", path, query={**(query or {}), "watch": "true", "resourceVersion": resource_version,
                                                "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds},
                       timeout=(10, timeout_seconds + 30), stream=True)
    try:
        for line in iter_resp_lines(response):
            if line:
                yield json.loads(line)
    except (HTTPError, OSError) as exc:
        raise KubeError(f"watch {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        response.release_conn()


def preferred_versions(api: Any) -> dict[str, str]:
    """API group -> its preferred version, from discovery (a group that is absent is not installed)."""
    groups = request(api, "GET", "/apis").get("groups") or []
    return {g["name"]: g["preferredVersion"]["version"] for g in groups if g.get("preferredVersion")}


def collection(group: str, version: str, plural: str, namespace: str | None = None) -> str:
    """The REST path of a collection, cluster-wide when ``namespace`` is None."""
    prefix = "/api/v1" if not group else f"/apis/{group}/{version}"
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
