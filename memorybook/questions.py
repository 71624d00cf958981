"""What a request may ask: question ids mapped to the SDK's questions, as objects (Noul, Choice,
Score, Box) or as the dicts its typing also takes (NoulModel, ...).

Dicts are read into the objects before anything is asked, by Jev, its stand-in and the wrapper
alike: the request, its cache key and the memory are then the same whichever form an app used,
and a test on MadeUpJev refuses what a call to Jev would.
"""

from __future__ import annotations

from pydantic import ValidationError
from typesafe_sdk import Box, Choice, Noul, Score

from memorybook.errors import MemorybookError

QUESTION_CLASSES = {cls.model_fields["type"].default: cls for cls in (Noul, Choice, Score, Box)}


class QuestionsError(MemorybookError, TypeError):
    """The questions are not question ids mapped to the SDK's questions."""


def question_objects(questions: object) -> dict:
    """The questions with each one as the SDK's object: those given as dicts read into it."""
    if not isinstance(questions, dict) or not questions:
        got = f"a {type(questions).__name__}" if questions else "none"
        raise QuestionsError(
            "questions must be a dict of question ids to typesafe_sdk questions (Noul, Choice, "
            f"Score, Box), at least one; got {got}.")
    return {question_id: _question(question_id, question)
            for question_id, question in questions.items()}


def _question(question_id: object, question: object) -> object:
    if isinstance(question, tuple(QUESTION_CLASSES.values())):
        return question
    named = f"Question {str(question_id)[:60]!r}"
    if not isinstance(question, dict):
        raise QuestionsError(
            f"{named} is a {type(question).__name__}; ask with typesafe_sdk's questions (Noul, "
            "Choice, Score, Box), or dicts of their fields.")
    kind = question.get("type")
    if kind not in QUESTION_CLASSES:
        raise QuestionsError(
            f"{named} has the type {str(kind)[:40]!r}; a question's `type` is one of "
            f"{sorted(QUESTION_CLASSES)}.")
    try:
        return QUESTION_CLASSES[kind].model_validate(question)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"])) or "it"
        raise QuestionsError(
            f"{named} is not a {kind} question the SDK can send: {where}: {first['msg']}."
        ) from None
