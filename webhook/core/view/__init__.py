"""The cluster's view, as values: what the webhook knows of the cluster beside what its rules file says.

One feature, so one folder: what the nodes publish (`node_facts`: each node's GPU, topology and fabric, gathered
into a `DiscoveredCatalog`), the rules' catalog merged with it (`node_catalog`), the PriorityClasses' state
(`priority_state`), and the one value that holds them all with the cluster's queues, DeviceClasses and claims
(`cluster_view.ClusterView`). The server's watches, ``check``'s files and the CLI's reads of a cluster each build a
`ClusterView`; `cluster_view.in_force` is the one function that turns the file's rules and that view into the
rules the request path reads. Nothing here does I/O: `webhook.cluster` fills these values off the request path.
"""
