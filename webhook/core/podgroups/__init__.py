"""Gang scheduling by the default kube-scheduler, through the Kubernetes Workload API (``scheduling.k8s.io``
``PodGroup``, alpha in v1.36 as ``v1alpha2``, beta in v1.37 as ``v1beta1``).

A training job whose pods arrive together must be placed all or nothing, or two jobs can each take part of the
nodes and wait for the rest forever. Where a queueing scheduler is chosen (`webhook.core.backends`) its own words
do that; on the default scheduler a ``PodGroup`` with ``schedulingPolicy.gang.minCount`` does, and its pods join it
by ``spec.schedulingGroup.podGroupName`` (set at creation, immutable). The Job controller makes one for an Indexed
Job whose completions equal its parallelism, and gives it nothing but the count; nobody makes one for the other
training kinds yet.

- `support`: what the cluster offers (the version it serves, which of its gated fields it keeps) and whether the
  server's group controller is running: discovered by the server, never configured;
- `plan`: what a job's group holds (the count, the topology key of the narrowest level that holds the job, the
  class's PriorityClass and disruption mode), the group's name and body in the version served, the patch that
  gives a Job controller's group what the profile knows, and what the user is told where none of it can be written.
"""
