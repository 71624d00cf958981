"""A stand-in for Jev in an app's tests: answers the test programs itself, never Jev's; no key.

    jev = MadeUpJev({"team": "billing", "remember": 0.9})  # a fixed answer per question id
    ask_with_memory(state, ROUTE, memories, ask=jev.ask)    # or ask=jev.ask_async

An answer may also be a function of the state it is asked about, programmed one question at a
time: `jev.answer("remember", lambda state: 0.9 if "Linux" in str(state) else 0.1)`. Program
every question the code asks: ask_with_memory() asks the gate ("remember", a Noul) through the
same `ask`; a question not programmed fails at once, naming it and how to program it. A Noul is
answered with its probability, a Choice with one of its options, a Score with one of its levels
(0 up); a Choice or a Score may instead be given each option's (level's) probability, as a dict.

Its responses are the SDK's, whole (model, usage, answers), and say they are made up: the model
"made-up-stand-in", and MadeUp in the class name every repr of them shows. Nothing it answers is
written to a recording. Pass `jev.ask` or `jev.ask_async` wherever an `ask` is taken, or the
stand-in itself where a Jev is (`Memory(store, ask=jev)`). In pytest, memorybook.testing's
`made_up_jev` fixture gives one for each test. `MadeUpJev(function)`, where
`function(state, questions)` returns an answer for each question asked, works as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from typesafe_sdk import ChoiceAnswer, NoulAnswer, ScoreAnswer, SystemOneResponse, Usage

from memorybook.errors import MemorybookError
from memorybook.questions import question_objects
from memorybook.recording.checks import ROUNDING, is_probability

MODEL = "made-up-stand-in"  # on every response, so that none passes for Jev's

# An answer as a test programs it: a Noul's probability, a Choice's option, a Score's level, or
# each option's (level's) probability as a dict; or a function of the state returning one.
Answer = float | str | int | Mapping[Any, float]
AnswerRule = Answer | Callable[[dict], Answer]


class MadeUpAnswerError(MemorybookError, ValueError):
    """A MadeUpJev was asked a question it has no fitting made-up answer for: the message names
    the question and how to program one."""


class _MadeUp:
    """Marks a made-up response or answer: its class name starts its repr, and str() is it."""

    def __str__(self) -> str:
        return repr(self)


class MadeUpResponse(_MadeUp, SystemOneResponse):
    """A SystemOneResponse a MadeUpJev made up."""


class MadeUpNoulAnswer(_MadeUp, NoulAnswer):
    """A NoulAnswer a MadeUpJev made up."""


class MadeUpChoiceAnswer(_MadeUp, ChoiceAnswer):
    """A ChoiceAnswer a MadeUpJev made up."""


class MadeUpScoreAnswer(_MadeUp, ScoreAnswer):
    """A ScoreAnswer a MadeUpJev made up."""


class MadeUpJev:
    """Jev's `ask` and `ask_async`, answering what the test programmed (the module's docstring
    says how): `MadeUpJev({question_id: answer, ...})`, then `.answer(question_id, answer)` for
    more. `calls` notes every call (its state and questions); `refusals`, every
    MadeUpAnswerError raised, caught by the code under test or not."""

    MODEL = MODEL

    def __init__(self, answers: Mapping[str, AnswerRule] | Callable[[dict, dict], dict]
                 | None = None) -> None:
        self.model = MODEL
        self.calls: list[dict] = []
        self.refusals: list[MadeUpAnswerError] = []
        self._programmed: dict[str, AnswerRule] = {}
        self._answer_all: Callable[[dict, dict], dict] | None = None
        if callable(answers) and not isinstance(answers, Mapping):
            self._answer_all = answers  # the first form: one function for every question
        elif isinstance(answers, Mapping):
            for question_id, answer in answers.items():
                self.answer(question_id, answer)
        elif answers is not None:
            raise TypeError(
                f"MadeUpJev() takes a dict of question ids to made-up answers, not a "
                f"{type(answers).__name__}.")

    def answer(self, question_id: str, answer: AnswerRule) -> MadeUpJev:
        """Answer `question_id` with `answer` from now on, or with what `answer(state)`
        returns; return the stand-in, so that calls chain."""
        if not isinstance(question_id, str):
            raise TypeError(
                f"MadeUpJev.answer() takes a question id (a str) and its made-up answer, not a "
                f"{type(question_id).__name__}.")
        self._programmed[question_id] = answer
        return self

    def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        """A made-up response to each question asked, as Jev's `ask()` returns a response."""
        questions = question_objects(questions)  # as Jev reads them: dicts become objects
        self.calls.append({"state": state, "questions": questions})
        try:
            answers = self._answers(state, questions)
        except MadeUpAnswerError as refused:  # its message says it all: not this module's frames
            self.refusals.append(refused)
            raise refused.with_traceback(None) from None
        return MadeUpResponse(model=MODEL, usage=Usage(input_tokens=0, output_tokens=0),
                              answers=answers)

    async def ask_async(self, state: dict, questions: dict) -> SystemOneResponse:
        """`ask()`, awaited."""
        return self.ask(state, questions)

    def __repr__(self) -> str:
        programmed = ", ".join(map(repr, self._programmed)) or "none programmed"
        function = "; an answer function for the rest" if self._answer_all else ""
        return f"MadeUpJev(made-up answers, not Jev's: {programmed}{function})"

    def _answers(self, state: dict, questions: dict) -> dict:
        from_function = {}
        if self._answer_all is not None and set(questions) - set(self._programmed):
            from_function = self._answer_all(state, questions)
            if not isinstance(from_function, dict):
                raise MadeUpAnswerError(
                    f"MadeUpJev's answer function returned a {type(from_function).__name__}: "
                    f"return a dict with a made-up answer for each question asked "
                    f"({sorted(questions)}).")
            for question_id in from_function:
                if question_id not in questions:
                    raise MadeUpAnswerError(
                        f"MadeUpJev's answer function answered {question_id!r}, which was not "
                        f"asked: answer only the questions asked ({sorted(questions)}).")
        answers = {}
        for question_id, question in questions.items():
            allowed, example = _allowed(question_id, question)
            if question_id in self._programmed:
                rule = self._programmed[question_id]
                value = rule(state) if callable(rule) else rule
            elif question_id in from_function:
                value = from_function[question_id]
            else:
                unanswered = ("its answer function left it unanswered" if self._answer_all
                              else "has no made-up answer for it")
                raise MadeUpAnswerError(
                    f"MadeUpJev was asked question {question_id!r}, a "
                    f"{question.type.capitalize()} question, and {unanswered}: program one "
                    f"with .answer({question_id!r}, {example!r}), giving {allowed} (or a "
                    "function of the state returning one).")
            answers[question_id] = _made_up_answer(question_id, question, value, allowed)
        return answers


def _allowed(question_id: str, question) -> tuple[str, object]:
    """What a question may be answered with, in words, and an example of it."""
    if question.type == "noul":
        return "a number in [0, 1], the probability of yes", 0.9
    if question.type == "choice":
        options = list(question.criteria)
        return (f"one of its options {options}, or a dict of their probabilities",
                options[0] if options else "")
    if question.type == "score":
        return (f"one of its levels 0 to {len(question.criteria) - 1}, or a dict of their "
                "probabilities", 0)
    raise MadeUpAnswerError(
        f"MadeUpJev was asked question {question_id!r}, a {question.type.capitalize()} "
        "question, and answers only Choice, Noul and Score ones: replay a recording of Jev's "
        "answers for it instead.")


def _made_up_answer(question_id: str, question, value: object, allowed: str):
    """The SDK's answer to `question` that `value` programs; MadeUpAnswerError if it is none."""
    if question.type == "noul" and is_probability(value):
        return MadeUpNoulAnswer(noul=float(value))
    if question.type == "choice":
        levels = list(question.criteria)
    else:
        levels = list(range(len(question.criteria))) if question.type == "score" else []
    probabilities = _distribution(value, levels)
    if probabilities is None:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise MadeUpAnswerError(
            f"MadeUpJev's made-up answer to question {question_id!r} is {shown}: answer it "
            f"with {allowed}.")
    top = max(levels, key=probabilities.__getitem__)  # the first of equals, as options go
    many = len(levels)  # the confidence as the API gives it, from the top probability
    confidence = 1.0 if many == 1 else max(0.0, round(
        (many * probabilities[top] - 1) / (many - 1), 2))
    if question.type == "choice":
        return MadeUpChoiceAnswer(choice=top, confidence=confidence, probabilities=probabilities)
    expected = round(sum(level * probability for level, probability in probabilities.items()), 2)
    legend = dict(enumerate(question.model_dump(mode="json")["criteria"]))
    return MadeUpScoreAnswer(score=float(expected), confidence=confidence, legend=legend,
                             probabilities=probabilities)


def _is_level(value: object, levels: list) -> bool:
    """Whether `value` is one of `levels` (options, str; or a Score's levels, int), as is."""
    kind = str if levels and isinstance(levels[0], str) else int
    return isinstance(value, kind) and not isinstance(value, bool) and value in levels


def _distribution(value: object, levels: list) -> dict | None:
    """Each level's probability: all on `value` when it is a level; a dict's, when they sum to
    1 within the API's rounding (levels left out: 0); None when `value` is neither."""
    if not levels:
        return None
    if _is_level(value, levels):
        return {level: 1.0 if level == value else 0.0 for level in levels}
    if not (isinstance(value, Mapping) and value
            and all(_is_level(level, levels) for level in value)
            and all(is_probability(probability) for probability in value.values())):
        return None
    if abs(sum(value.values()) - 1) > ROUNDING / 2 * len(levels) + 1e-9:
        return None
    return {level: float(value.get(level, 0.0)) for level in levels}
