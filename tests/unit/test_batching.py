"""Counts and log lines queued by requests and written in batches (webhook.batching, webhook.logs)."""

from __future__ import annotations

import json
import os
import time

from webhook.server import batching
from webhook.server.logs import AdmissionLog


def test_a_queue_hands_over_everything_once_in_order() -> None:
    seen: list[list[int]] = []
    queue: batching.Queue[int] = batching.Queue(seen.append)
    for item in range(1000):
        queue.put(item)
    queue.flush()
    queue.flush()  # nothing new: consume is not called with an empty batch
    # the flusher thread may have taken an earlier part: every item once, in order, no empty batch
    assert [item for batch in seen for item in batch] == list(range(1000)) and all(seen)


def test_the_flusher_thread_writes_without_being_asked() -> None:
    seen: list[int] = []
    queue: batching.Queue[int] = batching.Queue(seen.extend)
    queue.put(7)
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == [7]


def test_log_lines_are_written_whole_in_writes_of_at_most_pipe_buf() -> None:
    read, write = os.pipe()
    try:
        log = AdmissionLog(write, level="INFO")
        writes: list[bytes] = []
        emit = log._emit
        log._emit = lambda data: (writes.append(data), emit(data))  # type: ignore[method-assign]
        records = [{"msg": "admission", "uid": f"u{i}", "reasons": ["x" * 50] * (i % 5)} for i in range(200)]
        for record in records:
            log.write(record)
        log.flush()
        assert all(len(w) <= 4096 and w.endswith(b"\n") for w in writes) and len(writes) > 1
        data = b""
        while len(data) < sum(len(w) for w in writes):
            data += os.read(read, 65536)
        assert [json.loads(line) for line in data.splitlines()] == records
    finally:
        os.close(read)
        os.close(write)


def test_a_line_too_long_for_one_write_is_cut_and_marked() -> None:
    read, write = os.pipe()
    try:
        log = AdmissionLog(write, level="INFO")
        log.write({"msg": "admission", "uid": "u", "reasons": ["r" * 100] * 100})
        log.flush()
        line = os.read(read, 65536)
        assert len(line) < 4096 and json.loads(line) == {"msg": "admission", "uid": "u", "truncated": True}
    finally:
        os.close(read)
        os.close(write)


def test_admission_lines_are_off_above_info() -> None:
    log = AdmissionLog(2, level="WARNING")
    log.write({"msg": "admission"})
    assert not log.enabled and not log._queue._items
