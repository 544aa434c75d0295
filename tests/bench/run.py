"""`make bench`: ai-admission under load from wrk over TLS with keep-alive, against a minimal Flask app.

Both servers run the shipped gunicorn config on this machine; wrk replays a realistic mix of AdmissionReviews
(the test fixtures: GPU and non-GPU pods, allowed and denied, /validate and /mutate, and controller
templates). Each configuration runs several times; throughput is reported as min/median/max because one run
can mislead (connection placement across workers varies from run to run). Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from certs import ensure_dev_certs
from tests.conftest import ROOT, free_port
from tests.support.contexts import as_context
from tests.support.fixtures import POD_CASES
from tests.support.reviews import admission_review
from webhook.compiled import built_modules

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))


@dataclass
class Run:
    requests_per_second: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    requests: int
    cpu_ms_per_request: float = 0.0  # user + system time of the server's workers, from /proc


def corpus() -> list[tuple[str, dict[str, Any]]]:
    """(path, review) pairs: every fixture pod to /validate and /mutate, every manifest object to /validate."""
    items: list[tuple[str, dict[str, Any]]] = []
    for case in POD_CASES:
        items.append(("/validate", admission_review(copy.deepcopy(case.pod), namespace=case.namespace)))
        items.append(("/mutate", admission_review(copy.deepcopy(case.pod), namespace=case.namespace)))
    plurals = {"Deployment": "deployments", "CronJob": "cronjobs", "Job": "jobs", "PyTorchJob": "pytorchjobs",
               "JobSet": "jobsets", "InferenceService": "inferenceservices", "RayJob": "rayjobs"}
    for path in sorted((ROOT / "tests" / "manifests").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj["kind"] in plurals:
                group, _, version = obj["apiVersion"].rpartition("/")
                items.append(("/validate", admission_review(obj, group=group, version=version, kind=obj["kind"],
                                                            resource=plurals[obj["kind"]])))
    return items


def wide_pod_corpus(containers: int) -> list[tuple[str, dict[str, Any]]]:
    """One GPU pod with ``containers`` containers, to /validate and /mutate."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "wide-", "namespace": "ml-team",
                        "annotations": {"ai-admission.io/gpu-memory": "10Gi", "ai-admission.io/workload-type": "training"}},
           "spec": {"nodeSelector": {"gpu-type": "a100-80g"}, "containers": [
               {"name": f"c{i}", "image": "registry.example.com/img:1",
                "env": [{"name": "WORLD_SIZE", "value": "2"}, {"name": f"VAR_{i}", "value": "x"}],
                "resources": {"limits": {"nvidia.com/gpu": "1" if i < 8 else "0", "memory": "4Gi", "cpu": "1"},
                              "requests": {"memory": "4Gi", "cpu": "1"}}} for i in range(containers)]}}
    return [("/validate", admission_review(pod)), ("/mutate", admission_review(pod))]


def lua_script(items: list[tuple[str, dict[str, Any]]], path: Path) -> Path:
    lines = ["local reqs = {}"]
    for index, (url, review) in enumerate(items, start=1):
        body = json.dumps(review, separators=(",", ":"))
        lines.append(f'reqs[{index}] = wrk.format("POST", "{url}", {{["Content-Type"]="application/json"}}, '
                     f"[==[{body}]==])")
    lines += [
        "local i = 0",
        "request = function() i = i % #reqs + 1; return reqs[i] end",
        "done = function(summary, latency, requests)",
        "  local e = summary.errors",
        '  io.write(string.format(\'RESULT {"requests":%d,"duration_us":%d,"errors":%d,'
        '"p50":%d,"p90":%d,"p99":%d,"max":%d}\\n\', summary.requests, summary.duration,'
        " e.connect + e.read + e.write + e.status + e.timeout,"
        " latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class Server:
    def __init__(self, tls: Path, *, app: str | None = None, rules: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        env = {**os.environ, "PORT": str(self.port), "AI_ADMISSION_TLS_DIR": str(tls),
               "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "false", "AI_ADMISSION_DRAIN_SECONDS": "0"}
        if rules:
            env["AI_ADMISSION_RULES"] = str(rules)
        command = [GUNICORN, "-c", "python:webhook.server.gunicorn_conf", *([app] if app else [])]
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:  # every transient error is retried: a booting gunicorn may answer a TLS handshake late
                if requests.get(self.url + "/healthz", verify=str(tls / "ca.crt"), timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("server did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)

    def worker_cpu_ticks(self) -> int:
        """utime + stime of the workers (clock ticks); 0 where /proc is not available."""
        try:
            pid = self.process.pid
            total = 0
            for worker in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
                fields = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            return total
        except (OSError, ValueError, IndexError):
            return 0


def wrk(server: Server, script: Path, *, connections: int, seconds: int, threads: int) -> Run:
    before = server.worker_cpu_ticks()
    done = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script),
                           server.url], capture_output=True, text=True, timeout=seconds + 60)
    cpu_seconds = (server.worker_cpu_ticks() - before) / os.sysconf("SC_CLK_TCK")
    line = next(text for text in done.stdout.splitlines() if text.startswith("RESULT "))
    data = json.loads(line.removeprefix("RESULT "))
    return Run(requests_per_second=data["requests"] / (data["duration_us"] / 1e6), p50_ms=data["p50"] / 1000,
               p90_ms=data["p90"] / 1000, p99_ms=data["p99"] / 1000, max_ms=data["max"] / 1000,
               errors=data["errors"], requests=data["requests"],
               cpu_ms_per_request=cpu_seconds * 1000 / max(data["requests"], 1))


def interleaved(subjects: list[tuple[Server, Path]], *, connections: int, seconds: int, runs: int,
                threads: int) -> list[list[Run]]:
    """Runs of each (server, script), taken in turns (a, b, a, b, ...) so that the machine's drift over the
    minutes of a benchmark (other tenants, CPU frequency) falls on every subject alike; all servers are up
    for the whole series, the ones not measured idle."""
    for server, script in subjects:
        wrk(server, script, connections=connections, seconds=1, threads=threads)  # warm-up: imports, TLS, caches
    results: list[list[Run]] = [[] for _ in subjects]
    for _ in range(runs):
        for index, (server, script) in enumerate(subjects):
            results[index].append(wrk(server, script, connections=connections, seconds=seconds, threads=threads))
    return results


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.requests_per_second)[len(runs) // 2]


def spread(runs: list[Run]) -> str:
    rates = [r.requests_per_second for r in runs]
    return f"{min(rates):,.0f} / {statistics.median(rates):,.0f} / {max(rates):,.0f}"


def row(name: str, runs: list[Run]) -> str:
    m = median_run(runs)
    cpu = statistics.median(r.cpu_ms_per_request for r in runs)
    return (f"| {name} | {spread(runs)} | {cpu:.3f} | {m.p50_ms:.2f} | {m.p90_ms:.2f} | {m.p99_ms:.2f} | "
            f"{m.max_ms:.1f} | {sum(r.errors for r in runs)} |")


def many_signals_rules(path: Path, extra: int) -> Path:
    document = yaml.safe_load((ROOT / "rules" / "default.yaml").read_text())
    filler = [{"class": "batch", "labels": [{"key": f"example.com/team-{i}", "values": [f"v{i}"]}],
               "env": [{"name": f"TEAM_{i}"}]} for i in range(extra)]
    document["signals"] = filler + document["signals"]
    path.write_text(yaml.safe_dump(document))
    return path


def patch_operations() -> str:
    """Operations per patch of the fixture pods through the core (offline: no node facts), as "mean (min-max)"."""
    from webhook.config.rules_file import load_rules
    from webhook.core.admission import mutate_verdict

    rules = load_rules(ROOT / "rules" / "default.yaml")
    counts = [len(mutate_verdict(copy.deepcopy(case.pod), ctx=as_context(rules), mode="deny").patch) for case in POD_CASES]
    mutated = [c for c in counts if c]
    return f"{statistics.mean(mutated):.1f} ({min(mutated)}-{max(mutated)}) over {len(mutated)} mutated pods"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(text.split(":", 1)[1].strip() for text in Path("/proc/cpuinfo").read_text().splitlines()
                   if text.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {platform.system()}"


def build() -> str:
    """Whether the servers run the compiled admission core (the bench starts them from this checkout)."""
    built = built_modules()
    return (f"admission core compiled with mypyc ({len(built)} modules)" if built
            else "admission core interpreted (no compiled modules; `make compile` builds them)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("BENCH_SECONDS", "10")))
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "3")))
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--write", help="also write the report to this file")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed (make bench installs it with apt-get)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ai-admission-bench-"))
    tls = ensure_dev_certs(work / "tls")
    mix = lua_script(corpus(), work / "mix.lua")
    one = lua_script([("/validate", admission_review(POD_CASES[0].pod))], work / "one.lua")
    wide = lua_script(wide_pod_corpus(50), work / "wide.lua")
    narrow = lua_script(wide_pod_corpus(1), work / "narrow.lua")
    opts = {"seconds": args.seconds, "runs": args.runs, "threads": args.wrk_threads}
    results: dict[str, list[Run]] = {}
    with contextlib.ExitStack() as servers:
        def start(**kwargs: Any) -> Server:
            server = Server(tls, **kwargs)
            servers.callback(server.stop)
            return server

        minimal, ours = start(app="tests.bench.minimal_app:app"), start()
        for connections, label in ((64, "64 connections"), (1, "1 connection")):
            runs = interleaved([(minimal, mix), (ours, mix)], connections=connections, **opts)
            results[f"minimal Flask app, {label}"], results[f"ai-admission, {label}"] = runs
        many = start(rules=many_signals_rules(work / "many.yaml", 100))
        results["1-container pod, 1 connection"], results["50-container pod, 1 connection"] = interleaved(
            [(ours, narrow), (ours, wide)], connections=1, **opts)
        results["default rules (18 signals), 1 connection"], results["rules with 118 signals, 1 connection"] = (
            interleaved([(ours, one), (many, one)], connections=1, **opts))

    def ratio(a: str, b: str, field: str) -> float:
        if field == "rps":
            return median_run(results[a]).requests_per_second / median_run(results[b]).requests_per_second
        return median_run(results[a]).p50_ms / median_run(results[b]).p50_ms

    throughput = ratio("ai-admission, 64 connections", "minimal Flask app, 64 connections", "rps")
    cpu = (statistics.median(r.cpu_ms_per_request for r in results["ai-admission, 64 connections"])
           / statistics.median(r.cpu_ms_per_request for r in results["minimal Flask app, 64 connections"]))
    latency = ratio("ai-admission, 1 connection", "minimal Flask app, 1 connection", "p50")
    wide_ratio = ratio("50-container pod, 1 connection", "1-container pod, 1 connection", "p50")
    rules_ratio = ratio("rules with 118 signals, 1 connection", "default rules (18 signals), 1 connection", "p50")
    errors = sum(r.errors for runs in results.values() for r in runs)
    report = "\n".join([
        f"Machine: {machine()}; {build()}. wrk {args.wrk_threads} thread(s) on the same machine, TLS, keep-alive, "
        f"{args.runs} runs x {args.seconds} s each (after a 1 s warm-up), the compared configurations measured in "
        f"turns; latency percentiles from the median run; CPU is the workers' user + system time per request "
        f"(median run).",
        "",
        "| configuration | requests/s min / median / max | CPU ms/request | p50 ms | p90 ms | p99 ms | max ms | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *(row(name, runs) for name, runs in results.items()),
        "",
        f"- throughput at 64 connections vs the minimal app: **{throughput:.0%}** (target >= 70%); "
        f"CPU per request {cpu:.2f}x the minimal app's",
        f"- median latency at 1 connection vs the minimal app: **{latency:.2f}x** (target <= 1.5x)",
        f"- 50-container pod vs 1-container pod, median latency: **{wide_ratio:.2f}x** (target <= 3x)",
        f"- 118 signals vs 18 signals, median latency: **{rules_ratio:.2f}x** (target <= 3x)",
        f"- errors over all runs: **{errors}** (target 0)",
        f"- JSON Patch operations per /mutate answer over the fixture mix: {patch_operations()} (every one acts: "
        f"the scheduler's or the runtime's input, or the profile record)",
    ])
    print(report)
    if args.write:
        Path(args.write).write_text(report + "\n")
    shutil.rmtree(work, ignore_errors=True)
    ok = throughput >= 0.7 and latency <= 1.5 and wide_ratio <= 3 and rules_ratio <= 3 and errors == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
