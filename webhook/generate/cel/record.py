"""The profile record (`webhook.core.mutate._summary_text`) of a pod the native judgement calls whole, written as the
webhook writes it: its keys sorted, compact JSON, the memory per GPU in the webhook's quantity.

A pod judged whole is one pod (not multi-node, no ``jobPods``), asks for whole GPUs of one resource, names its
model by a label and its memory in whole Mi, Gi or Ti (`webhook.generate.cel.memory.stated_plainly`), so every part
of the record is a value the policy already holds; the class's own parts (its preemptibility, the reason it is of
the class) come from the rules, per class. Its need is stated per GPU, so it takes every GPU asked for
(``gpusNeeded``, `webhook.core.profile`).
"""

from __future__ import annotations

from typing import Mapping

from webhook.core.classify import annotated_reason
from webhook.core.rules import ClassSettings

from .memory import PLAIN_SUFFIXES, byte_quantity, memory_bytes
from .text import cel_string


def record_text(classes: Mapping[str, ClassSettings], workload: str = "variables.cls",
                memory_bytes: str = memory_bytes()) -> str:
    """The record of a judged pod of class ``workload`` (a CEL string), for the classes ``classes``; ``memory_bytes``:
    the bytes per GPU it states (`webhook.generate.cel.memory.memory_bytes`), where a policy holds them."""
    def ending(name: str, settings: ClassSettings) -> str:
        preemptible = "true" if settings.preemptible else "false"
        return f'","multiNode":false,"preemptible":{preemptible},"reason":"{annotated_reason(name)}"}}'

    tail = "{" + ", ".join(f"{cel_string(name)}: {cel_string(ending(name, s))}"
                           for name, s in sorted(classes.items())) + "}"
    parts = [cel_string('{"class":"'), workload, cel_string('","gpuMemoryPerGpu":"'), byte_quantity("mb", PLAIN_SUFFIXES),
             cel_string('","gpus":{"'), "variables.asked[0]", cel_string('":'), "string(variables.gpus)",
             cel_string('},"gpusNeeded":'), "string(variables.gpus)",
             cel_string(',"model":"'), "variables.model", f"{tail}[{workload}]"]
    return f"cel.bind(mb, {memory_bytes}, {' + '.join(parts)})"
