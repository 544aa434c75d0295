"""The cluster's view, as values: what the webhook knows of the cluster beside what its rules file says.

One feature, so one folder: what the nodes publish (`node_facts`: each node's GPU, topology and fabric, gathered
into a `DiscoveredCatalog`), where each model's nodes are (`targets`), the GPU nodes as the policy reads them
(`node_catalog`: the catalog in force), the GPU DeviceClasses (`gpu_classes`), the claims (`claims`), the
PriorityClasses' state (`priority_state`), and the one typed value that holds them all with the backend's queues
(`cluster_view.ClusterView`). The server's watches, ``check``'s files and the CLI's reads of a cluster each build
its parts (`observe`), once per change of what they are read from; a request reads them beside the rules through
its context (`webhook.core.context`). What the native policies read of it is written by `cluster_facts`. Nothing
here does I/O: `webhook.cluster` fills these values off the request path.
"""
