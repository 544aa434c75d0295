"""GPUs claimed through Dynamic Resource Allocation (``resource.k8s.io``): claims and claim templates judged, and
the GPUs a pod takes through them (`claims`); device selectors read, never evaluated (`cel`); the ``dra:`` block
of the rules (`rules`, checked against ``schema.json``). Import the modules themselves: the rules compile `rules`
before `claims` can be imported."""
