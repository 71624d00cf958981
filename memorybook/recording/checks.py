"""What can be wrong with a recorded entry: its shape, or its answer to the call's questions.

Each check returns what is wrong, naming the field, or None; the callers decide what to raise.
"""

from __future__ import annotations

import json
import math

ROUNDING = 0.01  # the API rounds every number it returns to this


def entry_shape_problem(entry: object) -> str | None:
    """What is wrong with an entry's structure, or None: what can be checked without the call."""
    if not isinstance(entry, dict):
        return f"it is a JSON {type(entry).__name__}, not an object"
    if not isinstance(entry.get("model"), str) or not entry["model"]:
        return "field `model` is missing or not a model id"
    usage = entry.get("usage")
    if not isinstance(usage, dict):
        return "field `usage` is missing or not an object"
    for name in ("input_tokens", "output_tokens"):
        count = usage.get(name)
        if count is not None and (not _is_int(count) or count < 0):
            return f"field `usage.{name}` is {count!r}, not a token count"
    answers = entry.get("answers")
    if not isinstance(answers, dict) or not answers:
        return "field `answers` is missing, empty or not an object"
    for question_id, answer in answers.items():
        if not isinstance(answer, dict) or not isinstance(answer.get("type"), str):
            return f"field `answers.{question_id}` is not an answer object with a `type`"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_probability(value: object) -> bool:
    """A finite number in [0, 1] (not a bool), as every probability the API returns."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


def answer_problem(entry: dict, questions: dict) -> str | None:
    """What makes `entry` not an answer the SDK accepts for these questions, or None."""
    problem = entry_shape_problem(entry)
    if problem is not None:
        return problem
    answers = entry["answers"]
    for question_id, question in questions.items():
        if question_id not in answers:
            return f"field `answers.{question_id}` is missing"
        answer, field = answers[question_id], f"answers.{question_id}"
        kind = question.get("type") if isinstance(question, dict) else None
        if answer["type"] != kind:
            return f"field `{field}.type` is {answer['type']!r}, but the question is a {kind}"
        if kind == "noul":
            if not is_probability(answer.get("noul")):
                value = answer.get("noul")
                return f"field `{field}.noul` is {value!r}, not a probability in [0, 1]"
        elif kind == "choice":
            problem = _choice_problem(answer, field, list(question.get("criteria") or {}))
            if problem is not None:
                return problem
    for question_id in answers:
        if question_id not in questions:
            return f"field `answers.{question_id}` answers a question the call did not ask"
    return _sdk_problem(entry)


def _choice_problem(answer: dict, field: str, options: list[str]) -> str | None:
    choice = answer.get("choice")
    if choice not in options:
        return f"field `{field}.choice` is {choice!r}, not one of the options {options}"
    if not is_probability(answer.get("confidence")):
        return (
            f"field `{field}.confidence` is {answer.get('confidence')!r}, not a number in [0, 1]"
        )
    probabilities = answer.get("probabilities")
    if not isinstance(probabilities, dict):
        return f"field `{field}.probabilities` is missing or not an object"
    if set(probabilities) != set(options):
        return (
            f"field `{field}.probabilities` has options {sorted(probabilities)}, "
            f"not the question's {sorted(options)}"
        )
    for option, value in probabilities.items():
        if not is_probability(value):
            where = f"{field}.probabilities.{option}"
            return f"field `{where}` is {value!r}, not a probability in [0, 1]"
    total = sum(probabilities.values())
    if abs(total - 1) > ROUNDING / 2 * len(options) + 1e-9:
        return (
            f"field `{field}.probabilities` sums to {total:.4f}, not 1 (within the API's rounding "
            f"to {ROUNDING})"
        )
    return None


def _sdk_problem(entry: dict) -> str | None:
    """The first field the SDK's own response model refuses, or None."""
    from pydantic import ValidationError
    from typesafe_sdk import SystemOneResponse

    try:
        SystemOneResponse.model_validate_json(json.dumps(entry))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the entry"
        return f"field `{where}`: {first['msg']}"
    return None
