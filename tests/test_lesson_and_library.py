"""The lesson and the library agree: notebook 1's own copy of the technique (the page a reader
copies) and memorybook (what an app installs) ask Jev the same questions about the same tickets,
build the same memories, and file every call under the same key. Both also replay the published
figures from the one recording (notebook 1 under nbval, the library in tests/test_modes.py,
tests/test_readme_app.py and examples/), so neither can drift from the other unnoticed."""

from __future__ import annotations

import json
import runpy

import pytest
from typesafe_sdk import SystemOneResponse

import memorybook
from memorybook import example
from tools.pattern import pattern_code, tagged_cells


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> dict:
    """Notebook 1's names: its pattern, loaded as a module would be (it calls nothing), and its
    example's tickets, from the cell that defines them."""
    folder = tmp_path_factory.mktemp("page")
    script = folder / "pattern.py"
    script.write_text(pattern_code(), encoding="utf-8")
    names = runpy.run_path(str(script), run_name="pattern")
    [tickets] = [source for source in tagged_cells("example") if source.startswith("DATA = {")]
    exec(tickets, names)  # noqa: S102 - notebook 1's own cell, the page's tickets
    return names


@pytest.mark.parametrize(("name", "library"), [
    ("TYPESAFE_MODEL", memorybook.TYPESAFE_MODEL),
    ("REMEMBER_AT", memorybook.REMEMBER_AT),
    ("MEMORY_KEY", memorybook.MEMORY_KEY),
    ("DATA", example.DATA),
    ("EARLIER", example.EARLIER),
])
def test_notebook_1_and_the_library_hold_the_same_inputs(page, name, library):
    assert page[name] == library, (
        f"notebook 1's {name} differs from the library's: change notebooks/01_memory_system.ipynb "
        f"and memorybook/ alike (CONTRIBUTING.md, 'Change a ticket')")


@pytest.mark.parametrize(("name", "library"), [("ROUTE", example.ROUTE),
                                               ("GATE", memorybook.GATE)])
def test_notebook_1_and_the_library_ask_the_same_questions(page, name, library):
    def worded(questions: dict) -> str:
        return json.dumps({qid: q.model_dump(mode="json", exclude_none=True)
                           for qid, q in questions.items()})

    assert worded(page[name]) == worded(library), (
        f"notebook 1's {name} is worded otherwise than the library's: change both alike "
        f"(CONTRIBUTING.md, 'Reword a question')")


def test_notebook_1_and_the_library_build_the_same_states_and_memories(page):
    for customer in example.CUSTOMERS:
        for index in range(len(example.DATA["later_messages"])):
            assert page["later_state"](customer, index) == example.later_state(customer, index)
    response = SystemOneResponse.model_validate({
        "model": memorybook.TYPESAFE_MODEL, "usage": {},
        "answers": {"team": {"type": "choice", "choice": "billing", "confidence": 1.0,
                             "probabilities": {"billing": 1.0}}}})  # made up, for the shape
    state = example.EARLIER[2]
    assert page["as_memory"](state, page["ROUTE"], response) == memorybook.as_memory(
        state, example.ROUTE, response), (
        "notebook 1's as_memory() and memorybook.as_memory() make different memories")
