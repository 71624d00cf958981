"""A stand-in for Jev in an app's unit tests: answers the test writes itself, never Jev's.

    jev = MadeUpJev(lambda state, questions: {"team": "billing"})
    ask_with_memory(state, ROUTE, memories, ask=jev.ask)            # or ask=jev.ask_async

Each response names the model "made-up-stand-in", so none can pass for Jev's, and nothing it
answers is ever written to a recording. For tests that need Jev's own answers, replay a recording
of the app's (memorybook.testing).
"""

from __future__ import annotations

from collections.abc import Callable

from typesafe_sdk import SystemOneResponse


class MadeUpJev:
    """`answer(state, questions)` returns, for each question id, the option chosen (a Choice) or
    the probability (a Noul); `ask` and `ask_async` turn that into a SystemOneResponse, as a
    Jev's do, and note every call in `calls`."""

    MODEL = "made-up-stand-in"  # on every response, so none passes for Jev's

    def __init__(self, answer: Callable[[dict, dict], dict]) -> None:
        self.answer = answer
        self.calls: list[dict] = []

    def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        self.calls.append({"state": state, "questions": questions})
        answers = {}
        for question_id, value in self.answer(state, questions).items():
            if isinstance(value, str):
                answers[question_id] = dict(type="choice", choice=value, confidence=1.0,
                                            probabilities={value: 1.0})
            else:
                answers[question_id] = {"type": "noul", "noul": float(value)}
        usage = {"input_tokens": 0, "output_tokens": 0}
        return SystemOneResponse.model_validate(
            {"model": self.MODEL, "usage": usage, "answers": answers})

    async def ask_async(self, state: dict, questions: dict) -> SystemOneResponse:
        return self.ask(state, questions)
