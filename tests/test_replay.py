"""A miss names the gate's threshold in use, read from where the collection registered it."""

from __future__ import annotations

import pytest

from memorybook.recording import is_memory_list, recorded_requests
from memorybook.replay import likely_reasons, read_threshold_from
from tests.helpers import fresh_memory_system


def reasons_for_one_memory_fewer() -> list[str]:
    """Why a recorded call carrying memories would miss when sent with one memory fewer: the
    memories differ, so the explanation turns to the threshold the gate used."""
    request = next(r for r in recorded_requests().values()
                   if any(is_memory_list(value) for value in r["state"].values()))
    state = {name: value[:-1] if is_memory_list(value) else value
             for name, value in request["state"].items()}
    return likely_reasons(state, request["questions"], request["model"])


@pytest.mark.parametrize("readers, named", [
    ([0.975], "REMEMBER_AT is 0.975 here and was 0.5"),
    ([0.5], "restart the kernel"),
    ([0.2, 0.3], "REMEMBER_AT is 0.3"),
    (["not a number"], "restart the kernel"),
    ([], "restart the kernel"),
], ids=["a raised threshold", "the recorded one", "the latest reader", "no number", "no reader"])
def test_a_miss_names_the_threshold_the_registered_reader_returns(readers, named, monkeypatch):
    fresh_memory_system(monkeypatch)  # as in a new process: no reader yet
    for value in readers:
        read_threshold_from(lambda value=value: value)
    [reason] = reasons_for_one_memory_fewer()
    assert reason.startswith("Memories: this call carries") and named in reason


def test_the_reader_is_asked_when_the_miss_is_explained_not_when_registered(monkeypatch):
    fresh_memory_system(monkeypatch)
    threshold = {"value": 0.5}
    read_threshold_from(lambda: threshold["value"])
    threshold["value"] = 0.9
    [reason] = reasons_for_one_memory_fewer()
    assert "REMEMBER_AT is 0.9 here" in reason
