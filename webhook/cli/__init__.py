"""The ``ai-admission`` command (`main`, and `kubectl_plugin` for kubectl): ``serve`` (gunicorn with TLS),
``check`` (offline verdicts), ``audit`` (what already runs), ``catalog`` (the nodes' GPUs), ``manifests``, ``certs``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from webhook.config.rules_file import load_rules
from webhook.config.settings import DEFAULT_TLS_DIR, Settings, SettingsError
from webhook.core.rules import Rules, RulesError

if TYPE_CHECKING:
    from webhook.core.view.cluster_view import ClusterView

DEV_CERTS = Path(DEFAULT_TLS_DIR)
RULES_ENV = "AI_ADMISSION_RULES"


def _serve(args: argparse.Namespace) -> int:
    if args.rules:
        os.environ[RULES_ENV] = args.rules
    if args.port:
        os.environ["PORT"] = str(args.port)
    try:
        settings = Settings.from_environ()
        load_rules(settings.rules)
    except (RulesError, SettingsError) as exc:
        print(f"ai-admission: {exc}", file=sys.stderr)
        return 2
    tls_dir = Path(settings.tls_directory)
    if tls_dir == DEV_CERTS or args.dev_certs:
        from certs import ensure_dev_certs

        ensure_dev_certs(tls_dir)
        os.environ["AI_ADMISSION_TLS_DIR"] = str(tls_dir)
    gunicorn = shutil.which("gunicorn", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if gunicorn is None:
        print("ai-admission: gunicorn is not installed", file=sys.stderr)
        return 2
    os.execv(gunicorn, [gunicorn, "-c", "python:webhook.server.gunicorn_conf"])
    return 0  # pragma: no cover - execv does not return


def _certs_dev(args: argparse.Namespace) -> int:
    from certs import ensure_dev_certs

    folder = ensure_dev_certs(args.dir, names=args.san or ("localhost", "127.0.0.1"))
    print(f"development certificates in {folder} (ca.crt, tls.crt, tls.key)")
    return 0


def _rules(args: argparse.Namespace, command: str) -> Rules | None:
    """The rules of ``--rules`` (else the default file); None once it said why they cannot be used."""
    try:
        return load_rules(args.rules or Settings.from_environ().rules)
    except (RulesError, SettingsError) as exc:
        print(f"ai-admission {command}: {exc}", file=sys.stderr)
        return None


def _discover(args: argparse.Namespace, command: str, rules: Rules) -> Any:
    """The cluster's node GPU catalog (one list of the Nodes), or None once it said why it cannot be read."""
    from webhook.cluster import client as kube
    from webhook.cluster.nodes import discover

    try:
        return discover(kube.client(args.kubeconfig), rules)
    except Exception as exc:  # noqa: BLE001 - API errors and the kubernetes client's configuration errors alike
        print(f"ai-admission {command}: cannot read the cluster's nodes: {exc}", file=sys.stderr)
        return None


def _device_classes(args: argparse.Namespace, command: str) -> list[dict[str, Any]] | None:
    """The cluster's DeviceClasses (one list), or None once it said why they cannot be read."""
    from webhook.cluster import client as kube
    from webhook.cluster.claims import list_device_classes

    try:
        return list_device_classes(kube.client(args.kubeconfig))
    except Exception as exc:  # noqa: BLE001 - API errors and the kubernetes client's configuration errors alike
        print(f"ai-admission {command}: cannot read the cluster's DeviceClasses: {exc}", file=sys.stderr)
        return None


def _cluster_view(args: argparse.Namespace, command: str, rules: Rules) -> ClusterView | None:
    """One read of the cluster's nodes, GPU DeviceClasses and (with a backend) queues, as a view; None once it said
    why one of them cannot be read."""
    from webhook.core.view.cluster_view import CLUSTER, Objects
    from webhook.core.view.observe import observe

    discovered = _discover(args, command, rules)
    if discovered is None:
        return None
    classes = _device_classes(args, command)
    if classes is None:
        return None
    queues = None
    if rules.scheduler.active:
        from webhook.cluster import client as kube
        from webhook.cluster.queues import list_queues

        try:
            queues = Objects(tuple(list_queues(kube.client(args.kubeconfig), rules.scheduler.backend.queue_kinds)),
                             CLUSTER)
        except Exception as exc:  # noqa: BLE001 - API errors and the kubernetes client's configuration errors alike
            print(f"ai-admission {command}: cannot read the cluster's queues: {exc}", file=sys.stderr)
            return None
    return observe(rules, nodes=discovered, device_classes=(Objects(tuple(classes), CLUSTER),), queues=queues)


def _nodes_view(sources: list[str], rules: Rules) -> ClusterView:
    """The cluster's view from Node objects in files (``kubectl get nodes -o yaml``), as the server's node watch
    would hold it: what placement, the fabric, the taints and rightsizing read, with no API call."""
    import time

    from webhook.cluster.nodes import NodeStore
    from webhook.core.view.observe import observe

    from .check import InputError, read_documents

    nodes = [dict(d.obj) for d in read_documents(sources) if d.obj.get("kind") == "Node"]
    if not nodes:
        raise InputError(f"--nodes {', '.join(sources)}: no Node objects")
    store = NodeStore(lambda: rules)
    store.replace(nodes)
    return observe(rules, nodes=store.catalog(synced_at=time.time()))


def _check(args: argparse.Namespace) -> int:
    from webhook.core.documents import check

    from .check import InputError, read_documents, render_json, render_text, render_yaml

    rules = _rules(args, "check")
    if rules is None:
        return 2
    from webhook.core.context import Context

    context = Context(rules)
    if args.cluster:
        read = _cluster_view(args, "check", rules)
        if read is None:
            return 2
        context = Context(rules, read)
    elif args.nodes:
        try:
            context = Context(rules, _nodes_view(args.nodes, rules))
        except InputError as exc:
            print(f"ai-admission check: {exc}", file=sys.stderr)
            return 2
    try:
        report = check(list(read_documents(args.filename)), context=context, namespace=args.namespace)
    except InputError as exc:
        print(f"ai-admission check: {exc}", file=sys.stderr)
        return 2
    render = {"text": render_text, "json": render_json, "yaml": render_yaml}[args.output]
    sys.stdout.write(render(report))
    return 1 if report.denied else 0


def _catalog(args: argparse.Namespace) -> int:
    from . import catalog

    rules = _rules(args, "catalog")
    if rules is None:
        return 2
    discovered = _discover(args, "catalog", rules)
    if discovered is None:
        return 2
    if args.output == "json":
        sys.stdout.write(json.dumps(catalog.as_json(discovered, rules), indent=2) + "\n")
    else:
        sys.stdout.write((catalog.render_yaml if args.output == "yaml" else catalog.render_table)(discovered, rules))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from webhook.cluster import audit
    from webhook.cluster import client as kube
    from webhook.core.context import Context

    from . import audit as output

    rules = _rules(args, "audit")
    if rules is None:
        return 2
    namespace = None if args.all_namespaces else (args.namespace or kube.context_namespace(args.kubeconfig))
    try:
        found = audit.audit(kube.client(args.kubeconfig), context=Context(rules), namespace=namespace)
    except (kube.KubeError, OSError, ValueError) as exc:
        print(f"ai-admission audit: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the kubernetes client's configuration errors have no common type
        print(f"ai-admission audit: cannot reach the cluster: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write((output.render_json if args.output == "json" else output.render_text)(found))
    return 1 if found.denied else 0


def _certs_create(args: argparse.Namespace) -> int:
    import datetime as dt

    from certs import issue_to_files, serving_names

    names = serving_names(args.service, args.namespace, args.san or ())
    window = dt.timedelta(days=args.renew_before_days)
    if not args.out_dir and not args.secret:
        print("ai-admission certs create: give --out-dir and/or --secret", file=sys.stderr)
        return 2
    if args.out_dir:
        issued = issue_to_files(args.out_dir, names=names, days=args.days, renew_before=window)
        print(f"{args.out_dir}: " + (f"serving certificate made ({issued.renewed})" if issued.renewed
                                     else "serving certificate still valid, kept"))
    if args.secret:
        from certs.kube import issue_to_secret
        from webhook.cluster.client import client

        issued = issue_to_secret(client(), secret=args.secret, namespace=args.namespace, names=names,
                                 days=args.days, renew_before=window)
        print(f"secret {args.namespace}/{args.secret}: " + (
            f"serving certificate made ({issued.renewed})" if issued.renewed else "serving certificate still valid, kept"))
    return 0


def _certs_patch(args: argparse.Namespace) -> int:
    from certs.kube import patch_ca_bundle, read_ca_bundle
    from webhook.cluster.client import client

    api = client()
    if args.ca_file:
        bundle = Path(args.ca_file).read_bytes()
    else:
        bundle = read_ca_bundle(api, secret=args.secret, namespace=args.namespace)
    changed = patch_ca_bundle(api, ca_bundle=bundle, mutating=args.mutating or (), validating=args.validating or ())
    print("caBundle updated in " + ", ".join(changed) if changed else "caBundle already current")
    return 0


def _manifests(args: argparse.Namespace) -> int:
    from webhook.generate import observability
    from webhook.generate.match_conditions import pod_condition
    from webhook.generate.webhooks import priority_classes, render, webhook_configurations

    if args.what == "dashboard":
        sys.stdout.write(observability.render_dashboard())
        return 0
    if args.what == "prometheusrule":
        sys.stdout.write(render([observability.prometheus_rule()], args.what))
        return 0
    if args.what == "servicemonitor":
        sys.stdout.write(render([observability.service_monitor()], args.what))
        return 0
    rules = _rules(args, "manifests")
    if rules is None:
        return 2
    if args.what == "priorityclasses":
        sys.stdout.write(render(priority_classes(rules), "priorityclasses"))
        return 0
    if args.what == "policy":
        from webhook.generate import backstop

        sys.stdout.write(render(backstop.manifests(rules), "policy"))
        return 0
    if args.what == "tolerations":
        from webhook.generate import backstop

        sys.stdout.write(render(backstop.toleration_policy(rules), "tolerations"))
        return 0
    if args.what == "native":
        from webhook.generate import native

        if rules.scheduler.active:
            print(f"ai-admission manifests: the {rules.scheduler.backend.name} backend's words on pods (queue, "
                  f"scheduler, group) are not in the native policies; while the webhook is down, pods get the "
                  f"class's /dev/shm and priority but reach the default scheduler's path", file=sys.stderr)
        sys.stdout.write(render(native.policies(rules), "native"))
        return 0
    if args.what == "native-webhooks":
        from webhook.generate import native

        sys.stdout.write(render(native.webhook_patch(rules), "native-webhooks"))
        return 0
    if pod_condition(rules) is None:
        print(f"ai-admission manifests: {rules.source} uses a regular expression CEL cannot express; the webhooks "
              f"get no matchConditions and the API server sends them every pod", file=sys.stderr)
    sys.stdout.write(render(webhook_configurations(rules), "webhooks"))
    return 0


def _docs(args: argparse.Namespace) -> int:
    from . import reference

    changed = reference.write(Path(args.dir))
    print(f"{args.dir}: " + (", ".join(changed) + " written" if changed else "current"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ai-admission", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the webhook under gunicorn with TLS")
    serve.add_argument("--port", type=int, help="port (default $PORT or 8443)")
    serve.add_argument("--rules", help=f"rules file (default ${RULES_ENV} or rules/default.yaml)")
    serve.add_argument("--dev-certs", action="store_true",
                       help="make development certificates in $AI_ADMISSION_TLS_DIR when missing")
    serve.set_defaults(func=_serve)

    checker = commands.add_parser(
        "check", help="judge Pods and pod templates offline, exactly as the webhook would",
        description="Exit 0 when everything is allowed, 1 when anything is denied, 2 on bad input.")
    checker.add_argument("-f", "--filename", action="append", required=True,
                         help="file, directory or - for standard input (repeatable)")
    checker.add_argument("--rules", help=f"rules file (default ${RULES_ENV} or rules/default.yaml)")
    checker.add_argument("-n", "--namespace", help="namespace for objects that name none (default: default)")
    checker.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                         help="text: a line per object/template; json: machine-readable; yaml: the mutated pods")
    checker.add_argument("--cluster", action="store_true",
                         help="judge against the catalog of the cluster's nodes and its GPU DeviceClasses merged "
                              "into the rules (as the server does), not the rules alone")
    checker.add_argument("--nodes", action="append", metavar="FILE",
                         help="judge against these Node objects (kubectl get nodes -o yaml), as the server's node "
                              "watch would: placement, fabric and rightsizing words included, no API call")
    checker.add_argument("--kubeconfig", help="kubeconfig file for --cluster (default: in-cluster, $KUBECONFIG)")
    checker.set_defaults(func=_check)

    def reading_the_cluster(name: str, help: str, description: str, outputs: tuple[str, ...]) -> Any:
        command = commands.add_parser(name, help=help, description=description)
        command.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)")
        command.add_argument("--rules", help=f"rules file (default ${RULES_ENV} or rules/default.yaml)")
        command.add_argument("-o", "--output", choices=outputs, default=outputs[0])
        return command

    cataloger = reading_the_cluster(
        "catalog", "the GPU models the cluster's nodes publish (GPU feature discovery, AMD's labeller)",
        "One list of the Nodes: per GPU product its memory as the devices report it, GPUs per node, nodes, the "
        "label values that name it and its MIG profiles; -o yaml prints them as a catalog block for the rules "
        "(the rules' names kept).", ("table", "yaml", "json"))
    cataloger.set_defaults(func=_catalog)

    auditor = reading_the_cluster(
        "audit", "judge the pods and controllers that exist now, as the webhook would",
        "Lists pods and pod-bearing controllers and judges them with the code of `check`; prints what deny mode "
        "would reject and what would be warned, per namespace and reason. Exit 0 when nothing would be denied, 1 "
        "when something would, 2 when the cluster cannot be read.", ("text", "json"))
    scope = auditor.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    auditor.set_defaults(func=_audit)

    manifests = commands.add_parser("manifests", help="print generated manifests (see manifests/base, "
                                                      "manifests/components/prometheus and .../backstop)")
    manifests.add_argument("what", choices=("priorityclasses", "webhooks", "policy", "tolerations", "native", "native-webhooks",
                                            "dashboard", "prometheusrule", "servicemonitor"))
    manifests.add_argument("--rules", help=f"rules file (default ${RULES_ENV} or rules/default.yaml): the classes' "
                                           f"PriorityClasses, which pods the webhooks are sent, and the backstop "
                                           f"policy (the ValidatingAdmissionPolicy and its bindings), the classes' "
                                           f"native MutatingAdmissionPolicies")
    manifests.set_defaults(func=_manifests)

    docs = commands.add_parser("docs", help="write the reference pages generated from the code (reason codes, rules "
                                            "keys, environment variables, metrics)")
    docs.add_argument("--dir", default="docs/reference", help="where (default docs/reference)")
    docs.set_defaults(func=_docs)

    certs = commands.add_parser("certs", help="certificate tooling")
    certs_commands = certs.add_subparsers(dest="certs_command", required=True)
    create = certs_commands.add_parser(
        "create", help="make a CA and a serving certificate (reusing a valid CA; renewing within the window)")
    create.add_argument("--service", default="ai-admission")
    create.add_argument("--namespace", default="ai-admission")
    create.add_argument("--san", action="append", help="extra subject alternative name (repeatable)")
    create.add_argument("--out-dir", help="write ca.crt, ca.key, tls.crt, tls.key here")
    create.add_argument("--secret", help="keep this kubernetes.io/tls Secret current (CA in <secret>-ca)")
    create.add_argument("--days", type=int, default=365, help="serving certificate lifetime")
    create.add_argument("--renew-before-days", type=int, default=30, help="renew when expiring within this")
    create.set_defaults(func=_certs_create)
    patch = certs_commands.add_parser("patch", help="write the CA bundle into webhook configurations")
    patch.add_argument("--mutating", action="append", help="MutatingWebhookConfiguration name (repeatable)")
    patch.add_argument("--validating", action="append", help="ValidatingWebhookConfiguration name (repeatable)")
    source = patch.add_mutually_exclusive_group(required=True)
    source.add_argument("--ca-file", help="PEM CA bundle file")
    source.add_argument("--secret", help="read ca.crt from this Secret")
    patch.add_argument("--namespace", default="ai-admission")
    patch.set_defaults(func=_certs_patch)

    dev = certs_commands.add_parser("dev", help="make a development CA and serving pair (reused while valid)")
    dev.add_argument("--dir", default=str(DEV_CERTS))
    dev.add_argument("--san", action="append", help="subject alternative name (repeatable)")
    dev.set_defaults(func=_certs_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def kubectl_plugin() -> int:
    """``kubectl ai-admission ...``: kubectl runs the executable ``kubectl-ai_admission`` found on PATH."""
    return main(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
