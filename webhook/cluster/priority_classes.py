"""The cluster's PriorityClasses, watched, against the ones the rules set (see `webhook.core.view.priority_state` for why).

An `Informer` keeps every PriorityClass's value and preemption policy; after each list and event the state is
worked out afresh for the rules in force (``wanted``, called each time, so a rules reload is taken at the next
change or resync) and logged when they change. An API error keeps the last state, with the error. RBAC: ``list``
and ``watch`` on priorityclasses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable, Iterable

from webhook.core.rules import PriorityClassSpec
from webhook.core.view.priority_state import (
    UNCHECKED,
    InstalledPriorityClass,
    PriorityClassState,
    installed_priority_class,
    priority_class_state,
)

from .informer import Api, Informer, Observer, api_calls

log = logging.getLogger("ai_admission")
PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"


class PriorityClassStore:
    def __init__(self, on_change: Callable[[], None]) -> None:
        self.installed: dict[str, InstalledPriorityClass] = {}
        self.listed = False  # nothing is known before the first list
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self.installed)

    @staticmethod
    def _name(obj: dict[str, Any]) -> str:
        return str((obj.get("metadata") or {}).get("name") or "")

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.installed = {self._name(o): installed_priority_class(o) for o in objects if self._name(o)}
        self.listed = True
        self._on_change()

    def put(self, obj: dict[str, Any]) -> None:
        self.installed[self._name(obj)] = installed_priority_class(obj)
        self._on_change()

    def remove(self, obj: dict[str, Any]) -> None:
        self.installed.pop(self._name(obj), None)
        self._on_change()


class PriorityClassWatch:
    """``state``: the last known state (`UNCHECKED` until the first list)."""

    def __init__(self, wanted: Callable[[], Iterable[PriorityClassSpec]], *, resync: float = 60.0,
                 api: Callable[[], Api] = api_calls, observer: Observer | None = None,
                 on_change: Callable[[PriorityClassState], None] | None = None) -> None:
        self._wanted = wanted
        self.state = UNCHECKED
        self.on_change = on_change
        self.store = PriorityClassStore(self.refresh)
        self.informer = Informer("priorityclasses", PATH, self.store, api, resync=resync, observer=_Errors(self, observer))

    def start(self) -> PriorityClassWatch:
        self.informer.start()
        return self

    def stop(self) -> None:
        self.informer.stop()

    def refresh(self) -> None:
        """Work the state out again (after a change in the cluster, or in the rules)."""
        if not self.store.listed:
            return
        self._set(priority_class_state(self._wanted(), self.store.installed))

    def _set(self, state: PriorityClassState) -> None:
        previous = self.state
        if (state.missing_priority_classes, state.differing_priority_classes, state.error) != (
                previous.missing_priority_classes, previous.differing_priority_classes, previous.error):
            log.warning(json.dumps({"msg": "priority classes checked", **state.as_dict()}))
        self.state = state
        if self.on_change is not None:
            self.on_change(state)

    def failed(self, error: str | None) -> None:
        """An API error: the last answer stays, with the error beside it."""
        self._set(dataclasses.replace(self.state, error=error))


class _Errors:
    """Passes the informer's news on, and puts its errors into the state."""

    def __init__(self, watch: PriorityClassWatch, observer: Observer | None) -> None:
        self._watch = watch
        self._observer = observer

    def synced(self, name: str, status: Any) -> None:
        if self._observer is not None:
            self._observer.synced(name, status)

    def failed(self, name: str, status: Any) -> None:
        self._watch.failed(status.error)
        if self._observer is not None:
            self._observer.failed(name, status)
