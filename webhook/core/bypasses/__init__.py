"""Paths to a GPU that are not accelerator requests: device variables, GPU RuntimeClasses, privileged
containers, CDI annotations, device-request mounts, host device paths, DRA's implicit names, env from ConfigMaps
and Secrets.

One feature across the stages, so one folder: the rules block (`rules`: each path's action, per class), the
findings validation runs (`paths`, in `webhook.core.validate.CHECKS`), and what admission cannot see and how it is
covered (`env_sources`; the voiding of visible devices is a step of `webhook.core.mutate`).
"""
