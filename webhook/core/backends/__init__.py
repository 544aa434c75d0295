"""Scheduler backends: Kueue, KAI-Scheduler, Volcano and coscheduling as data, each in its own words.

One feature across the stages, so one folder: the rules block (`rules`: which backend, what each writes where),
the queues as the cluster or the input has them (`queues`), and what is done with both (`scheduling`): the words
written on owners, templates and pods at /mutate, and the checks of a workload's queue, quota and topology that
validation runs (`webhook.core.validate.CHECKS`).
"""
