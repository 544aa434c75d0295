"""The admission core: the whole decision, as pure functions from an object and the rules (and the cluster's facts,
as values) to a verdict and a patch.

The rule of this folder: no I/O, no thread, no metric, no global state, no Kubernetes API call, and nothing
imported from the layers above (`webhook.config`, `webhook.cluster`, `webhook.generate`, `webhook.server`,
`webhook.cli`). The one file it reads is its own package data (the rules' schemas, once, when rules are
compiled). It runs on every pod creation in the cluster, so setup.py compiles every module here with mypyc;
`make lint` enforces the rule with import-linter (the contracts in setup.cfg).

The spine is flat and the features that span its stages are folders beside it (`workloads`, `backends`,
`bypasses`, `podgroups`, `rightsizing`, `dra`, `view`), each with its rules block, findings and writes;
`validate.CHECKS` and `mutate.STEPS` list what is decided, and setup.cfg's "The core's order" contract keeps the
direction of every module.

One direction of flow, a module per step: request (`review`) -> pod (`podview`, `hints`) -> class (`classify`)
-> profile (`models`, `parallelism`, `profile`, `dra`) -> findings (`validate.CHECKS`, `findings`) -> verdict
(`admission.verdict_of`) -> patch (`mutate`, `patch`) -> response (`review.build_response`). Objects with pod templates
become the pods they make (`workloads`); the rules are compiled once (`rules`: what the file says); what is
known of the cluster is one value beside them (`view.cluster_view.ClusterView`), its parts built once per change of
their input (`view.observe`), and a request is judged in the two side by side (`context.Context`); sets of objects
are judged by `documents`.
"""
