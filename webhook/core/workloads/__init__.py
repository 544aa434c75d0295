"""Workloads: every kind of object that makes pods, read as the pods it will make.

A pod is judged as it comes; a controller or a CRD is judged through its pod templates, each with the number of
pods it makes and what the reader knows of the job. The choice between the two readers is made once
(`templates_of` in `kinds` for the kinds the table knows, `generic.generic_templates` for the rest, read by shape),
and the job's size (`parallelism`) is read the same way for both. Nothing here judges: it hands pods to the spine.
"""
