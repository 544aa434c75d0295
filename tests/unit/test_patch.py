"""The patch editor: recorded operations reproduce the edits, parents are created, keys escaped, input untouched."""

from __future__ import annotations

import copy

import jsonpatch

from webhook.core.patch import Editor, pointer


def replay(original: dict, editor: Editor) -> dict:
    return jsonpatch.apply_patch(copy.deepcopy(original), editor.ops)


def test_missing_and_null_parents_are_created_in_one_operation() -> None:
    original = {"metadata": {"name": "p", "labels": None}, "spec": {"containers": [{"name": "c"}]}}
    editor = Editor(original)
    editor.set(("metadata", "annotations", "example.com/key~x"), "v")
    editor.set(("metadata", "labels", "a/b"), "1")
    editor.append(("spec", "containers", 0, "env"), {"name": "A", "value": "1"})
    editor.append(("spec", "containers", 0, "env"), {"name": "B", "value": "2"})
    editor.set(("spec", "affinity", "podAffinity", "preferred"), [])
    assert [op["path"] for op in editor.ops] == [
        "/metadata/annotations", "/metadata/labels", "/spec/containers/0/env", "/spec/containers/0/env/-",
        "/spec/affinity"]
    assert editor.ops[0]["value"] == {"example.com/key~x": "v"}
    assert replay(original, editor) == editor.doc
    assert editor.doc["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]


def test_recorded_values_are_snapshots() -> None:
    original: dict = {"spec": {}}
    editor = Editor(original)
    editor.append(("spec", "tolerations"), {"key": "a"})
    editor.append(("spec", "tolerations"), {"key": "b"})
    assert editor.ops[0]["value"] == [{"key": "a"}]
    assert replay(original, editor)["spec"]["tolerations"] == [{"key": "a"}, {"key": "b"}]


def test_original_is_never_modified_and_untouched_parts_are_shared() -> None:
    original = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "env": []}, {"name": "d"}]}}
    frozen = copy.deepcopy(original)
    editor = Editor(original)
    editor.append(("spec", "containers", 0, "env"), {"name": "X", "value": "1"})
    editor.setdefault(("metadata", "labels", "a"), "2")
    editor.remove(("metadata", "labels", "missing"))
    assert original == frozen
    assert editor.doc["spec"]["containers"][1] is original["spec"]["containers"][1]
    assert editor.doc["metadata"] is original["metadata"]
    assert len(editor.ops) == 1


def test_pointer_escaping() -> None:
    assert pointer(("metadata", "labels", "ai-admission.io/workload-type")) == "/metadata/labels/ai-admission.io~1workload-type"
    assert pointer(("a~b", 3)) == "/a~0b/3"


def test_a_parent_of_the_wrong_type_is_replaced_not_indexed() -> None:
    """Found by fuzzing: annotations given as a list made the editor index a list with a string."""
    original = {"metadata": {"annotations": ["not", "a", "map"], "labels": "text"}, "spec": {"volumes": {"a": 1}}}
    editor = Editor(original)
    editor.set(("metadata", "annotations", "ai-admission.io/profile"), "{}")
    editor.setdefault(("metadata", "labels", "a"), "1")
    editor.append(("spec", "volumes"), {"name": "v"})
    assert editor.doc == {"metadata": {"annotations": {"ai-admission.io/profile": "{}"}, "labels": {"a": "1"}},
                          "spec": {"volumes": [{"name": "v"}]}}
    assert replay(original, editor) == editor.doc


def test_extend_adds_an_absent_list_in_one_operation_and_appends_to_a_present_one() -> None:
    original = {"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}
    editor = Editor(original)
    editor.extend(("spec", "tolerations"), [{"key": "a"}, {"key": "b"}])
    editor.extend(("spec", "containers", 0, "env"), [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}])
    editor.extend(("spec", "volumes"), [])
    assert [(op["op"], op["path"]) for op in editor.ops] == [
        ("add", "/spec/tolerations"), ("add", "/spec/containers/0/env/-"), ("add", "/spec/containers/0/env/-")]
    assert editor.ops[0]["value"] == [{"key": "a"}, {"key": "b"}]
    assert replay(original, editor) == editor.doc
    assert original["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
