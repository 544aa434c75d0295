"""Talking to the cluster, off the request path: the one client (`client`), the one list + watch loop
(`informer`) that every watch uses (Nodes: `nodes`; DRA claims: `claims`; PriorityClasses: `priority_classes`;
PolicyReports: `reports`), periodic work (`background`), and what already runs judged (`audit`)."""
