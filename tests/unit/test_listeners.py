"""Which worker slot (listening socket) a new gunicorn worker serves (webhook.server.listeners)."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.server.listeners import choose_slot


@dataclass
class Worker:
    age: int
    ai_admission_slot: int


def test_first_workers_take_one_slot_each() -> None:
    workers: list[Worker] = []
    for age in (1, 2):
        workers.append(Worker(age, choose_slot(workers, 2)))
    assert [w.ai_admission_slot for w in workers] == [0, 1]


def test_on_sighup_each_new_worker_takes_an_old_workers_slot() -> None:
    """gunicorn starts all new workers, then stops the old ones: every slot must keep a new worker."""
    workers = [Worker(1, 1), Worker(2, 0)]
    for age in (3, 4):
        workers.append(Worker(age, choose_slot(workers, 2)))
    new = {w.ai_admission_slot for w in workers if w.age > 2}
    assert new == {0, 1}
    assert workers[2].ai_admission_slot == 1  # the slot of the oldest worker first (gunicorn stops oldest first)


def test_a_replaced_worker_leaves_its_slot_to_its_replacement() -> None:
    survivors = [Worker(5, 0)]  # the worker of slot 1 exited
    assert choose_slot(survivors, 2) == 1
    still_draining = [Worker(5, 0), Worker(6, 1), Worker(4, 1)]  # slot 1's old worker is still finishing
    assert choose_slot(still_draining, 2) == 0
