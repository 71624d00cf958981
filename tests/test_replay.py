"""A miss names the gate's threshold in use, read from where the collection registered it."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_python

# A recorded call carrying memories, sent with one memory fewer: the memories differ, so the
# explanation turns to the threshold the gate used.
MEMORIES_DIFFER = """
    import json
    from memorybook.recording import is_memory_list, recorded_requests
    from memorybook.replay import likely_reasons, read_threshold_from

    request = next(r for r in recorded_requests().values()
                   if any(is_memory_list(value) for value in r["state"].values()))
    state = {name: value[:-1] if is_memory_list(value) else value
             for name, value in request["state"].items()}
    {register}
    print(json.dumps(likely_reasons(state, request["questions"], request["model"])))
"""


@pytest.mark.parametrize("register, named", [
    ("read_threshold_from(lambda: 0.975)", "REMEMBER_AT is 0.975 here and was 0.5"),
    ("read_threshold_from(lambda: 0.5)", "restart the kernel"),
    ("read_threshold_from(lambda: 0.2); read_threshold_from(lambda: 0.3)", "REMEMBER_AT is 0.3"),
    ("read_threshold_from(lambda: 'not a number')", "restart the kernel"),
    ("", "restart the kernel"),
], ids=["a raised threshold", "the recorded one", "the latest reader", "no number", "no reader"])
def test_a_miss_names_the_threshold_the_registered_reader_returns(register, named):
    result = run_python(MEMORIES_DIFFER.replace("{register}", register))
    assert result.returncode == 0, result.stderr
    [reason] = json.loads(result.stdout)
    assert reason.startswith("Memories: this call carries") and named in reason


def test_the_reader_is_asked_when_the_miss_is_explained_not_when_registered():
    result = run_python(MEMORIES_DIFFER.replace("{register}", (
        "threshold = {'value': 0.5}; read_threshold_from(lambda: threshold['value']); "
        "threshold['value'] = 0.9")))
    assert result.returncode == 0, result.stderr
    assert "REMEMBER_AT is 0.9 here" in result.stdout
