"""ai-admission: a Kubernetes admission webhook for GPU clusters shared by training, inference, batch and HPO.

The flow is one direction, a module per step:
request (`review`) -> pod (`podview`) -> profile (`classify`, `profile`) -> decisions (`policy`)
-> patch (`mutate`) -> response (`review.build_response`). Flask (`app`) only parses, calls and serialises.
"""

__version__ = "0.1.0"

from .compiled import check_fresh as _check_fresh

_check_fresh()
