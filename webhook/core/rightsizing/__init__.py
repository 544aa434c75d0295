"""GPUs asked beyond the need: a pod whose whole-model need fits in fewer GPUs than it asks for, and a need that one
card of a smaller model of the cluster (or a MIG slice a node offers) holds.

One feature across the stages, so one folder: the rules block (`rules`: what each finding gets, per class, and which
classes are data-parallel), the devices of the cluster smaller than a card (`smaller`: read by the findings and by
the facts the native policy looks up), and the findings validation runs (`findings`, in
`webhook.core.validate.CHECKS`). The GPU count a need takes is the profile's (`webhook.core.profile`), worked out by
the capacity denial's own count (`webhook.core.workloads.parallelism.parallel_size`).
"""
