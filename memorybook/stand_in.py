"""A stand-in for Jev in an app's unit tests: answers the test writes itself, never Jev's.

    jev = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"team": "billing"}))
    ask_with_memory(state, ROUTE, memories, ask=jev.ask)            # or ask=jev.ask_async

Answer every question asked: ask_with_memory() asks the gate ("remember", a Noul) through the
same `ask`. Each response names the model "made-up-stand-in", so none can pass for Jev's, and
nothing it answers is ever written to a recording. For tests that need Jev's own answers, replay
a recording of the app's (memorybook.testing).
"""

from __future__ import annotations

from collections.abc import Callable

from typesafe_sdk import SystemOneResponse

from memorybook.errors import MemorybookError
from memorybook.questions import question_objects
from memorybook.recording.checks import is_probability


class MadeUpAnswerError(MemorybookError, ValueError):
    """A MadeUpJev's answer function returned answers that do not fit the questions asked."""


class MadeUpJev:
    """`answer(state, questions)` returns, for each question id, the option chosen (a Choice) or
    the probability (a Noul); `ask` and `ask_async` turn that into a SystemOneResponse, as a
    Jev's do, and note every call in `calls`. Answers that do not fit raise MadeUpAnswerError."""

    MODEL = "made-up-stand-in"  # on every response, so none passes for Jev's

    def __init__(self, answer: Callable[[dict, dict], dict]) -> None:
        self.answer = answer
        self.calls: list[dict] = []

    def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        questions = question_objects(questions)  # as Jev reads them: dicts become objects
        self.calls.append({"state": state, "questions": questions})
        made_up = self.answer(state, questions)
        if not isinstance(made_up, dict):
            raise MadeUpAnswerError(
                f"MadeUpJev's answer function returned a {type(made_up).__name__}: return a dict "
                f"with an answer for each question asked ({sorted(questions)}).")
        answers = {}
        for question_id, question in questions.items():
            kind = question.type
            options = list(question.criteria or {}) if kind == "choice" else []
            allowed = (f"one of its options {options}" if kind == "choice"
                       else "a number in [0, 1]" if kind == "noul" else None)
            if allowed is None:
                raise MadeUpAnswerError(
                    f"Question {question_id!r} is a {kind} question, and MadeUpJev answers only "
                    "Choice and Noul ones: replay a recording of Jev's answers for it instead.")
            if question_id not in made_up:
                raise MadeUpAnswerError(
                    f"MadeUpJev's answer function left question {question_id!r} unanswered: "
                    f"answer it with {allowed}.")
            value = made_up[question_id]
            if kind == "choice" and isinstance(value, str) and value in options:
                answers[question_id] = dict(type="choice", choice=value, confidence=1.0,
                                            probabilities={value: 1.0})
            elif kind == "noul" and is_probability(value):
                answers[question_id] = {"type": "noul", "noul": float(value)}
            else:
                raise MadeUpAnswerError(
                    f"MadeUpJev's answer to question {question_id!r} is {value!r}: answer it "
                    f"with {allowed}.")
        for question_id in made_up:
            if question_id not in questions:
                raise MadeUpAnswerError(
                    f"MadeUpJev's answer function answered {question_id!r}, which was not asked: "
                    f"answer only the questions asked ({sorted(questions)}).")
        usage = {"input_tokens": 0, "output_tokens": 0}
        return SystemOneResponse.model_validate(
            {"model": self.MODEL, "usage": usage, "answers": answers})

    async def ask_async(self, state: dict, questions: dict) -> SystemOneResponse:
        return self.ask(state, questions)

