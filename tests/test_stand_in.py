"""MadeUpJev (memorybook/stand_in.py): its docstring's example runs as written, and answers that
do not fit the questions asked are refused, naming the question and what it may be answered."""

from __future__ import annotations

import textwrap

import pytest

import memorybook.stand_in
from memorybook import (
    InMemoryMemories,
    MadeUpAnswerError,
    MadeUpJev,
    MemorybookError,
    ask_with_memory,
)
from memorybook.example import ROUTE
from memorybook.memory import GATE

STATE = {"customer": {"id": "C-1042"}, "ticket": {"id": "T-1", "subject": "Invoice"}}
AS_DICTS = {question_id: question.model_dump(mode="json")
            for question_id, question in {**ROUTE, **GATE}.items()}


def test_the_docstrings_example_runs_as_written():
    example = textwrap.dedent(memorybook.stand_in.__doc__.split("\n\n")[1])
    assert "MadeUpJev(" in example and "ask_with_memory(" in example, example
    memories = InMemoryMemories()
    exec(example, {"MadeUpJev": MadeUpJev, "ask_with_memory": ask_with_memory,
                   "state": STATE, "ROUTE": ROUTE, "memories": memories})
    [memory] = memories.recall("C-1042")
    assert memory["request"] == STATE, (
        "the example in memorybook/stand_in.py's docstring must route the ticket and keep it: "
        "its answer function must answer the gate ('remember') as well as ROUTE's 'team'")


@pytest.mark.parametrize("questions", [{**ROUTE, **GATE}, AS_DICTS], ids=["objects", "dicts"])
@pytest.mark.parametrize(("answers", "question_id", "allowed"), [
    ({"team": "billing"}, "remember", "a number in [0, 1]"),
    ({"remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": "Billing", "remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": 3, "remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": "billing", "remember": 1.5}, "remember", "a number in [0, 1]"),
    ({"team": "billing", "remember": True}, "remember", "a number in [0, 1]"),
    ({"team": "billing", "remember": "0.9"}, "remember", "a number in [0, 1]"),
    ({"team": "billing", "remember": 0.9, "urgent": 0.2}, "urgent", "the questions asked"),
], ids=["unanswered", "unanswered choice", "not an option", "not a string", "above 1", "a bool",
        "a string", "not asked"])
def test_answers_that_do_not_fit_the_questions_are_refused_naming_the_question(
        questions, answers, question_id, allowed):
    jev = MadeUpJev(lambda state, asked: answers)
    with pytest.raises(MadeUpAnswerError) as refused:
        jev.ask(STATE, questions)
    message = str(refused.value)
    assert isinstance(refused.value, MemorybookError) and "\n" not in message
    assert repr(question_id) in message and allowed in message, (
        f"MadeUpJev.ask() (memorybook/stand_in.py) must check each made-up answer against the "
        f"question asked and say in one line which question and what it may be: {message}")


@pytest.mark.parametrize("questions", [ROUTE, {"team": AS_DICTS["team"]}], ids=["object", "dict"])
def test_an_answer_among_the_options_is_a_response_of_the_stand_ins(questions):
    response = MadeUpJev(lambda state, asked: {"team": "billing"}).ask(STATE, questions)
    assert response.model == MadeUpJev.MODEL and response.answers["team"].choice == "billing"
