"""The annotation and label names ai-admission reads and writes: its API towards users, not policy."""

PREFIX = "ai-admission.io/"
WORKLOAD_TYPE = PREFIX + "workload-type"
GPU_MODEL = PREFIX + "gpu-model"
GPU_MEMORY = PREFIX + "gpu-memory"
MODEL_PARAMS = PREFIX + "model-params"
MODEL_PRECISION = PREFIX + "model-precision"
PREEMPTIBLE = PREFIX + "preemptible"
MULTI_NODE = PREFIX + "multi-node"
# "false" on a multi-node training pod (or its template): scheduled one by one, not as its job's gang
GANG = PREFIX + "gang"
# How the pod spreads its work over every GPU it asks for ("tensor", "pipeline", "data", "expert"), where its
# command line does not say: it is then never told that it asks for GPUs beyond its memory need.
PARALLELISM = PREFIX + "parallelism"
PROFILE = PREFIX + "profile"
# Written by a native class policy beside the profile record when it judged the pod whole (the webhooks then leave
# the pod out: webhook/generate/native_record.py); the webhook never writes it.
JUDGED_BY = PREFIX + "judged-by"

# The namespace label that routes a namespace's pods to /validate/<mode> (the generated webhook configurations and
# backstop bindings select on it; audit reads it).
MODE_LABEL = PREFIX + "mode"
