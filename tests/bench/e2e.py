"""`make bench-e2e`: what a webhook costs pod creation as the API server sees it (docs/contributors/benchmarks.md).

A real etcd + kube-apiserver (tests/support/control_plane.py) and the webhook servers run on this machine; each server is
registered as the same two webhooks (the generated configurations, matchConditions included) for namespaces of
its own, and one namespace has no webhook. Pods are created with ``dryRun=All`` (the whole admission chain,
nothing stored) by client threads with keep-alive connections: 16 for throughput, 1 for latency. Two loads:

- burst: identical pods, as a Job with ``parallelism: 500`` or a ReplicaSet scale-up creates them (generateName,
  owner reference, GPU request, profile annotations);
- mix: the fixture pods in turn (GPU and plain, allowed and denied).

The native set (`webhook.generate.native`: the classes' MutatingAdmissionPolicies, the GPU toleration policy and
the backstop ValidatingAdmissionPolicy, all inside the API server) is measured alone, with no webhook, and beside
ai-admission; the time from applying each of its policies to the API server acting on it is measured first.

A second baseline, the minimal app answering with ai-admission's own patches (tests/bench/patching_app.py), makes
the API server do what ai-admission's answers make it do: it separates the cost of mutating at all (paid in the
API server) from ai-admission's own. ``--one-label`` adds the same app answering with a one-operation patch (a
label): what any change to a pod costs, whatever the webhook.

Servers are up together and runs alternate (no webhook, minimal Flask app, [Go], ai-admission, ...), as `make
bench` does, so the machine's drift falls on all alike; figures are medians over the runs. Calls per pod come
from ai-admission's own metrics. The Go net/http server (tests/bench/allowed.go, the floor) runs when `go` is
installed (Debian's golang-go; `make bench-e2e` installs it).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from certs import ensure_dev_certs
from tests.bench.run import Server, build, machine
from tests.conftest import ROOT, free_port
from tests.support.contexts import as_context
from tests.support.control_plane import ControlPlane, find_binaries, namespace_name
from tests.support.e2e_install import ROUTE_LABEL, routed_configurations
from tests.support.e2e_load import PodLoad
from tests.support.fixtures import POD_CASES
from tests.support.metrics import metric
from webhook.config.rules_file import load_rules
from webhook.generate.webhooks import priority_classes

BURST_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"generateName": "train-sweep-", "labels": {"job-name": "train-sweep", "batch.kubernetes.io/job-name": "train-sweep"},
                 "annotations": {"ai-admission.io/gpu-memory": "20Gi", "ai-admission.io/workload-type": "training"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-sweep", "controller": True,
                                      "blockOwnerDeletion": True, "uid": "6f1d2c3b-0000-4000-8000-000000000001"}]},
    "spec": {"restartPolicy": "Never", "nodeSelector": {"gpu-type": "a100-80g"},
             "containers": [{"name": "train", "image": "registry.example.com/sweep:1",
                             "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "4"},
                                           "requests": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "4"}}}]},
}


NATIVE_LABEL = "bench.ai-admission.io/native"  # the native set is bound to namespaces with this label
NATIVE = "native set (no webhook)"
ONE_LABEL_POLICY = "a one-label MutatingAdmissionPolicy"  # what any mutating policy that acts costs
BOTH = "ai-admission + native set"
PATCHING = "minimal app + ai-admission's patches"  # tests/bench/patching_app.py
ONE_LABEL = "minimal app + a one-label patch"  # the same, AI_ADMISSION_BENCH_PATCH=one-label


@dataclass
class Subject:
    name: str
    namespace: str
    metrics_url: str | None = None  # ai-admission's /metrics, for calls per pod
    ca: str = ""


@dataclass
class Run:
    pods_per_second: float
    p50_ms: float
    p99_ms: float
    calls_per_pod: float | None
    failed: int
    ops_per_patch: float | None = None  # JSON Patch operations per /mutate answer


def mix_pods() -> list[dict[str, Any]]:
    from tests.support.apiserver import for_apiserver

    return [for_apiserver(case.pod, "placeholder") for case in POD_CASES]


def _counts(subject: Subject) -> tuple[float, float, float]:
    """(calls for pods, patch operations, /mutate answers) as ai-admission's own metrics count them."""
    assert subject.metrics_url
    text = requests.get(subject.metrics_url, verify=subject.ca, timeout=10).text
    return (metric(text, "ai_admission_requests_total", kind="Pod", operation="CREATE"),
            metric(text, "ai_admission_patch_operations_sum"), metric(text, "ai_admission_patch_operations_count"))


def measure(plane: ControlPlane, subject: Subject, pods: list[dict[str, Any]], *, connections: int,
            seconds: float) -> Run:
    plan = []
    for pod in pods:
        pod = copy.deepcopy(pod)
        pod["metadata"]["namespace"] = subject.namespace
        plan.append((pod, "any"))
    before = _counts(subject) if subject.metrics_url else (0.0, 0.0, 0.0)
    load = PodLoad(plane, subject.namespace, plan, threads=connections).start()
    time.sleep(seconds)
    outcomes = load.stop()
    calls = ops = None
    if subject.metrics_url:
        time.sleep(0.4)  # counts reach the shared files in batches (0.2 s)
        after = _counts(subject)
        calls = (after[0] - before[0]) / max(len(outcomes), 1)
        ops = (after[1] - before[1]) / max(after[2] - before[2], 1)
    latencies = sorted(o.seconds * 1000 for o in outcomes)
    return Run(pods_per_second=len(outcomes) / seconds, p50_ms=statistics.median(latencies),
               p99_ms=latencies[int(len(latencies) * 0.99) - 1], calls_per_pod=calls,
               failed=sum(1 for o in outcomes if not o.as_expected), ops_per_patch=ops)


def register(plane: ControlPlane, *, name: str, url: str, ca_pem: bytes, rules: Any,
             labels: dict[str, str] | None = None, native: bool = False) -> str:
    """Register ``url`` as the two webhooks for a namespace of its own (``native``: with the native component's
    condition, as the native overlay ships them); the namespace."""
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        routed_configurations(url=url, ca_pem=ca_pem, rules=rules, route=name, native=native)))
    return plane.create_namespace(namespace_name(f"bench-{name}"), {ROUTE_LABEL: name, **(labels or {})})


def _dry_run(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> requests.Response:
    return requests.post(f"{plane.url}/api/v1/namespaces/{namespace}/pods?dryRun=All", json=pod,
                         headers=plane.auth_headers(), verify=str(plane.ca), timeout=10)


def one_label_policy(plane: ControlPlane) -> str:
    """A MutatingAdmissionPolicy that sets one label on every pod, bound to a namespace of its own: the least a
    native mutation costs (the API server's fixed work for a policy that acts); the namespace."""
    name = "bench-one-label"
    objects = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["pods"]}]},
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": "Object{metadata: Object.metadata{labels: {'bench.ai-admission.io/seen': 'yes'}}}"}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": name}, "spec": {"policyName": name, "matchResources": {"namespaceSelector": {
             "matchExpressions": [{"key": name, "operator": "Exists"}]}}}}]
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr
    return plane.create_namespace(namespace_name("bench-one-label"), {ROUTE_LABEL: "one-label", name: "true"})


def install_native(plane: ControlPlane, rules: Any) -> tuple[str, dict[str, float]]:
    """Apply the native set (bound to a namespace of its own, created first) and its parameter (once its kind is
    served, as the server creates it), and time, from the moment the apply returned, until the API server acts on
    each kind of policy; the namespace and the seconds per policy."""
    from tests.support.clusters import a100_cluster, with_nodes
    from tests.support.e2e_install import BARE_JOB, BARE_POD, facts_installed
    from webhook.core.view.cluster_facts import facts_data
    from webhook.generate import backstop, native, webhooks

    namespace = plane.create_namespace(namespace_name("bench-native"), {ROUTE_LABEL: "native", NATIVE_LABEL: "true"})
    objects = native.native_set(rules, [{"key": NATIVE_LABEL, "operator": "Exists"}])
    home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": webhooks.NAME}}
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([home, *objects]))
    assert done.returncode == 0, done.stderr
    applied = time.monotonic()
    # the parameter as the server writes it once its kind is served, with what a node watch learns on GKE-like nodes
    # and A100 nodes (the burst pod's model): the class policies then do all their work (placement and the nodes'
    # taints looked up, and the common pod judged whole, which the webhooks registered with the native component's
    # condition then never see)
    # written beside the probes, as the server writes it while the API server takes up the policies: the kind's
    # establishment is the parameter's to wait for, not the backstop's
    writer = threading.Thread(target=facts_installed, args=(plane, facts_data(as_context(with_nodes(a100_cluster(), rules)))))
    writer.start()
    profiled = copy.deepcopy(BURST_POD)
    unclassed = copy.deepcopy(BURST_POD)  # of no class: the same policy gives it its GPU tolerations
    del unclassed["metadata"]["annotations"]["ai-admission.io/workload-type"]
    probes = {
        native.POLICY: lambda: _dry_run(plane, namespace, profiled).json().get("spec", {})
        .get("priorityClassName") == "ai-training",
        f"{native.POLICY} (a pod of no class)": lambda: any(t.get("key") == "nvidia.com/gpu" for t in _dry_run(
            plane, namespace, unclassed).json().get("spec", {}).get("tolerations", [])),
        backstop.NAME: lambda: f"'{backstop.NAME}'" in _dry_run(plane, namespace, BARE_POD).text,
        backstop.policy_name(backstop.TEMPLATES): lambda: backstop.policy_name(backstop.TEMPLATES) in requests.post(
            f"{plane.url}/apis/batch/v1/namespaces/{namespace}/jobs?dryRun=All", json=BARE_JOB,
            headers=plane.auth_headers(), verify=str(plane.ca), timeout=10).text,
    }
    enforced: dict[str, float] = {}
    deadline = applied + 120
    while len(enforced) < len(probes) and time.monotonic() < deadline:
        for name, probe in probes.items():
            if name not in enforced and probe():
                enforced[name] = time.monotonic() - applied
        time.sleep(0.05)
    writer.join()
    return namespace, enforced


def go_floor(work: Path, tls: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    go = shutil.which("go")
    if go is None:
        return None
    binary = work / "allowed"
    env = {"GOCACHE": str(work / "gocache"), "GOPATH": str(work / "gopath"), "HOME": str(work), "PATH": "/usr/bin:/bin"}
    subprocess.run([go, "build", "-o", str(binary), str(ROOT / "tests" / "bench" / "allowed.go")], check=True,
                   env=env, capture_output=True, timeout=300)
    port = free_port()
    process = subprocess.Popen([str(binary), f"127.0.0.1:{port}", str(tls / "tls.crt"), str(tls / "tls.key")])
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.ConnectionError):
            requests.get(url + "/healthz", verify=str(tls / "ca.crt"), timeout=1)
            return process, url
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the Go floor server did not start")


@contextlib.contextmanager
def _environment(**values: str) -> Any:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--without-cache", action="store_true",
                        help="also run ai-admission with its decision cache off (AI_ADMISSION_DECISION_CACHE=0)")
    parser.add_argument("--one-label", action="store_true",
                        help="also run the minimal app answering each pod ai-admission mutates with a one-label patch")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ai-admission-bench-e2e-"))
    tls = ensure_dev_certs(work / "tls")
    rules = load_rules(ROOT / "rules" / "default.yaml")
    ca_pem = (tls / "ca.crt").read_bytes()
    results: dict[tuple[str, str, int], list[Run]] = {}
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(ControlPlane(find_binaries(), work / "control-plane"))
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(priority_classes(rules)))
        minimal = Server(tls, app="tests.bench.minimal_app:app")
        stack.callback(minimal.stop)
        ours = Server(tls)
        stack.callback(ours.stop)
        patching = Server(tls, app="tests.bench.patching_app:app")
        stack.callback(patching.stop)
        subjects = [Subject("no webhook", plane.create_namespace(namespace_name("bench-none"), {ROUTE_LABEL: "none"})),
                    Subject("minimal Flask app", register(plane, name="minimal", url=minimal.url, ca_pem=ca_pem,
                                                          rules=rules)),
                    Subject(PATCHING, register(plane, name="patching", url=patching.url, ca_pem=ca_pem, rules=rules))]
        if args.one_label:
            with _environment(AI_ADMISSION_BENCH_PATCH="one-label"):
                labelling = Server(tls, app="tests.bench.patching_app:app")
            stack.callback(labelling.stop)
            subjects.append(Subject(ONE_LABEL, register(plane, name="label", url=labelling.url, ca_pem=ca_pem,
                                                        rules=rules)))
        floor = go_floor(work, tls)
        if floor is not None:
            stack.callback(floor[0].kill)
            subjects.append(Subject("Go net/http \"allowed\"", register(plane, name="go", url=floor[1], ca_pem=ca_pem,
                                                                        rules=rules)))
        subjects.append(Subject("ai-admission", register(plane, name="ours", url=ours.url, ca_pem=ca_pem, rules=rules),
                                metrics_url=ours.url + "/metrics", ca=str(tls / "ca.crt")))
        native_namespace, enforced = install_native(plane, rules)
        subjects.append(Subject(NATIVE, native_namespace))
        subjects.append(Subject(ONE_LABEL_POLICY, one_label_policy(plane)))
        subjects.append(Subject(BOTH, register(plane, name="both", url=ours.url, ca_pem=ca_pem, rules=rules,
                                               labels={NATIVE_LABEL: "true"}, native=True),
                                metrics_url=ours.url + "/metrics", ca=str(tls / "ca.crt")))
        if args.without_cache:  # the same server with the decision cache off, measured in the same turns
            with _environment(AI_ADMISSION_DECISION_CACHE="0"):
                uncached = Server(tls)
            stack.callback(uncached.stop)
            subjects.append(Subject("ai-admission, no decision cache", register(
                plane, name="uncached", url=uncached.url, ca_pem=ca_pem, rules=rules),
                metrics_url=uncached.url + "/metrics", ca=str(tls / "ca.crt")))
        time.sleep(3)  # the configurations reach the API server's informers
        loads = {"burst of identical pods": [BURST_POD], "mix of fixture pods": mix_pods()}
        for subject in subjects:  # warm-up: connections, TLS sessions, imports
            measure(plane, subject, [BURST_POD], connections=16, seconds=1)
        for load_name, pods in loads.items():
            for connections in (16, 1):
                for _ in range(args.runs):
                    for subject in subjects:
                        run = measure(plane, subject, pods, connections=connections, seconds=args.seconds)
                        results.setdefault((subject.name, load_name, connections), []).append(run)
    print(report(results, subjects=[s.name for s in subjects], loads=list(loads), args=args))
    print("\nFrom applying the native set to the API server acting on each policy: " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in enforced.items()) + " (target: 2 s).")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def report(results: dict[tuple[str, str, int], list[Run]], *, subjects: list[str], loads: list[str],
           args: argparse.Namespace) -> str:
    lines = [f"Machine: {machine()}; {build()}. kube-apiserver v1.36 and etcd on the same machine, pods created with "
             f"dryRun=All by Python client threads (keep-alive); {args.runs} runs x {args.seconds:g} s per "
             f"configuration, in turns; medians over the runs.", "",
             "| load | webhook | pods/s at 16 connections | vs no webhook | p50 ms at 1 connection | added p50 ms | "
             "p99 ms at 1 connection | calls per pod | ops per patch | failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    summary = []
    for load in loads:
        base16 = _median(results[("no webhook", load, 16)], "pods_per_second")
        base1 = _median(results[("no webhook", load, 1)], "p50_ms")
        added: dict[str, float] = {}
        rates: dict[str, float] = {}
        for name in subjects:
            fast, single = results[(name, load, 16)], results[(name, load, 1)]
            rate, p50 = _median(fast, "pods_per_second"), _median(single, "p50_ms")
            added[name], rates[name] = p50 - base1, rate
            calls = [r.calls_per_pod for r in fast + single if r.calls_per_pod is not None]
            ops = [r.ops_per_patch for r in fast + single if r.ops_per_patch is not None]
            lines.append(f"| {load} | {name} | {rate:,.0f} | {rate / base16:.0%} | {p50:.2f} | "
                         f"{p50 - base1:+.2f} | {_median(single, 'p99_ms'):.2f} | "
                         f"{f'{statistics.median(calls):.2f}' if calls else '-'} | "
                         f"{f'{statistics.median(ops):.1f}' if ops else '-'} | {sum(r.failed for r in fast + single)} |")
        minimal = "minimal Flask app"
        ours = "ai-admission"
        summary.append(f"- {load}: ai-admission's added median latency {added[ours]:.2f} ms = "
                       f"**{added[ours] / added[minimal]:.2f}x** the minimal app's ({added[minimal]:.2f} ms; target "
                       f"<= 1.2x); throughput **{rates[ours] / rates[minimal]:.2f}x** the minimal app's (target >= "
                       f"0.9x). Against the minimal app answering with ai-admission's own patches "
                       f"({added[PATCHING]:.2f} ms, {rates[PATCHING]:,.0f} pods/s): "
                       f"**{added[ours] / added[PATCHING]:.2f}x** the latency, "
                       f"**{rates[ours] / rates[PATCHING]:.2f}x** the throughput")
        go = next((n for n in subjects if n.startswith("Go ")), None)
        summary.append(f"- {load}: the native set alone adds {added[NATIVE]:.2f} ms and keeps "
                       f"{rates[NATIVE] / base16:.0%} of the throughput (a one-label policy: "
                       f"{added[ONE_LABEL_POLICY]:.2f} ms, {rates[ONE_LABEL_POLICY] / base16:.0%})" +
                       (f" (Go allow-all webhook: {added[go]:.2f} ms, {rates[go] / base16:.0%})" if go else "") +
                       f"; with ai-admission too, {added[BOTH]:.2f} ms and {rates[BOTH] / base16:.0%}")
    return "\n".join([*lines, "", *summary])


if __name__ == "__main__":
    sys.exit(main())
