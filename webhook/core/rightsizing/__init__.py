"""GPUs asked beyond the need: a pod whose whole-model need fits in fewer GPUs than it asks for.

One feature across the stages, so one folder: the rules block (`rules`: what the finding gets, per class, and which
classes are data-parallel) and the findings validation runs (`findings`, in `webhook.core.validate.CHECKS`). The
GPU count a need takes is the profile's (`webhook.core.profile`), worked out by the capacity denial's own count
(`webhook.core.workloads.parallelism.parallel_size`).
"""
