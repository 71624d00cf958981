"""MadeUpJev (memorybook/stand_in.py): its docstring's example runs as written, and answers that
do not fit the questions asked are refused, naming the question and what it may be answered."""

from __future__ import annotations

import textwrap

import pytest

import memorybook.stand_in
from memorybook import (
    InMemoryMemories,
    Jev,
    MadeUpAnswerError,
    MadeUpJev,
    MemorybookError,
    QuestionsError,
    ask_with_memory,
    request_json,
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


ASKERS = {"MadeUpJev": lambda: MadeUpJev(lambda state, asked: {"team": "billing"}).ask,
          "Jev": lambda: Jev(mode="replay").ask}


@pytest.mark.parametrize("questions", [
    [ROUTE["team"]],
    {"team": "Which team?"},
    {"team": {**AS_DICTS["team"], "type": "pick"}},
    {"team": {"type": "choice", "instructions": "Which team?"}},
], ids=["a list", "a string", "an unknown type", "a choice without options"])
@pytest.mark.parametrize("asker", sorted(ASKERS))
def test_questions_jev_refuses_the_stand_in_refuses_alike_before_answering(asker, questions):
    with pytest.raises(QuestionsError) as refused:
        ASKERS[asker]()(STATE, questions)
    message = str(refused.value)
    assert "\n" not in message and ("'team'" in message or "list" in message), (
        f"{asker}.ask() must refuse questions that are not the SDK's with one line of "
        f"QuestionsError (memorybook/questions.py), naming the question: {message}")


def test_a_question_as_a_dict_is_the_same_request_as_the_object():
    as_dict = {"team": AS_DICTS["team"]}
    assert request_json(STATE, as_dict) == request_json(STATE, ROUTE), (
        "memorybook/questions.py must read a question given as a dict into the SDK's object, so "
        "that its request and cache key are the object's")
    jev = MadeUpJev(lambda state, asked: {"team": "billing"})
    jev.ask(STATE, as_dict)
    assert jev.calls[0]["questions"] == ROUTE
