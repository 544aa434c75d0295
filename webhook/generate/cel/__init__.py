"""The CEL library: every predicate over a pod that the API server must evaluate, written once.

The webhooks' ``matchConditions`` (`webhook.generate.match_conditions`), the backstop's ValidatingAdmissionPolicies
(`webhook.generate.backstop`) and the native MutatingAdmissionPolicy with its judgement (`webhook.generate.native`,
`webhook.generate.native_record`) are composed from these modules, and from nothing else written in CEL:

- `precision`: the three precisions a predicate may have, as types (`Exact`, `Superset`, `Subset`), and the
  registry that ties each predicate to the Python it stands for (`mirrored`);
- `text`: literals, regular expressions, optionals, JSON Patch operations, the rewrite of ``cel.bind``;
- `resources`: accelerators, what a container asks for, GPU counts;
- `model`, `memory`, `paths`: which model a pod names, whether it states its memory, its paths to a GPU that are
  not requests;
- `job`: the job a pod is one of (its size, multi-node, its labels) and the facts of its nodes;
- `views`: the pod-shaped things of each kind (the kinds table, and a CEL twin per Python builder);
- `tolerations`, `record`: the GPU tolerations a pod lacks, and the profile record of a pod judged whole.

What depends on the rules and the cluster rather than on the pod is worked out in Python and handed to the API
server as the facts parameter (`webhook.core.view.cluster_facts`): the CEL looks answers up.
"""
