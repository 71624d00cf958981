"""MadeUpJev (memorybook/stand_in.py): its docstring's example runs as written; it answers each
question as the test programmed it (a fixed answer, a function of the state, or the first form's
one function for every question), in whole SDK responses, marked as made up wherever they show,
through its `ask`, its `ask_async` or itself where the library takes a Jev; a question not
programmed, or answered with what does not fit it, is refused at once, naming the question and
how to answer it."""

from __future__ import annotations

import asyncio
import logging
import textwrap

import pytest
from typesafe_sdk import Box, Choice, Noul, Score, SystemOneResponse

import memorybook.stand_in
from memorybook import (
    AsyncMemory,
    InMemoryMemories,
    Jev,
    MadeUpAnswerError,
    MadeUpJev,
    Memory,
    MemorybookError,
    PendingGates,
    QuestionsError,
    ask_with_memory,
    ask_with_memory_async,
    request_json,
    ticket_id_of,
)
from memorybook.example import ROUTE
from memorybook.memory import GATE
from memorybook.recording.checks import answer_problem

STATE = {"customer": {"id": "C-1042"}, "ticket": {"id": "T-1", "subject": "Invoice"}}
AS_DICTS = {question_id: question.model_dump(mode="json")
            for question_id, question in {**ROUTE, **GATE}.items()}
URGENCY = {"urgency": Score(instructions="How urgent is `ticket`?",
                            criteria=["it can wait", "this week", "today"])}
SPAM = {"spam": Noul(instructions="Is `ticket` spam?")}
OPTIONS = list(ROUTE["team"].criteria)


def test_the_docstrings_example_runs_as_written():
    example = textwrap.dedent(memorybook.stand_in.__doc__.split("\n\n")[1])
    assert "MadeUpJev(" in example and "ask_with_memory(" in example, example
    memories = InMemoryMemories()
    exec(example, {"MadeUpJev": MadeUpJev, "ask_with_memory": ask_with_memory,
                   "state": STATE, "ROUTE": ROUTE, "memories": memories})
    [memory] = memories.recall("C-1042")
    assert memory["request"] == STATE, (
        "the example in memorybook/stand_in.py's docstring must route the ticket and keep it: "
        "it must answer the gate ('remember') as well as ROUTE's 'team'")


def linux(state: dict) -> bool:
    return "Linux" in str(state)


@pytest.mark.parametrize("make", [
    lambda: MadeUpJev({"team": lambda state: "selfhosted_linux" if linux(state) else "general",
                       "remember": lambda state: 0.9 if linux(state["request"]) else 0.1}),
    lambda: MadeUpJev().answer(
        "team", lambda state: "selfhosted_linux" if linux(state) else "general").answer(
        "remember", lambda state: 0.9 if linux(state["request"]) else 0.1),
    lambda: MadeUpJev(lambda state, questions: (
        {"remember": 0.9 if linux(state["request"]) else 0.1} if "remember" in questions
        else {"team": "selfhosted_linux" if linux(state) else "general"})),
], ids=["a dict of functions", "answer() chained", "one function, as before"])
@pytest.mark.parametrize("way", ["ask", "ask_async"])
def test_a_stand_in_answers_each_question_as_programmed_from_the_state(make, way):
    jev, memories = make(), InMemoryMemories()
    routed = []
    for ticket, text in [("T-1", "We run Linux."), ("T-2", "Backups fail.")]:
        state = {"customer": {"id": "C-7"}, "ticket": {"id": ticket, "text": text}}
        if way == "ask":
            response = ask_with_memory(state, ROUTE, memories, ask=jev.ask)
        else:
            async def routed_with_memory(state=state):
                gates = PendingGates()
                response = await ask_with_memory_async(state, ROUTE, memories, gates=gates,
                                                       ask=jev.ask_async)
                await gates.drain()
                return response
            response = asyncio.run(routed_with_memory())
        routed.append(response.answers["team"].choice)
    kept = [ticket_id_of(memory) for memory in memories.recall("C-7")]
    assert (routed, kept) == (["selfhosted_linux", "selfhosted_linux"], ["T-1"]), (
        f"MadeUpJev.{way} (memorybook/stand_in.py) must answer each question as the test "
        f"programmed it, from the state it is asked about: routed {routed}, kept {kept}")


@pytest.mark.parametrize("kind", ["Memory", "AsyncMemory"])
def test_the_stand_in_goes_whole_where_the_library_takes_a_jev(kind):
    jev = MadeUpJev({"team": lambda state: "selfhosted_linux" if linux(state) else "general",
                     "remember": lambda state: 0.9 if linux(state["request"]) else 0.1})
    tickets = [{"customer": {"id": "C-7"}, "ticket": {"id": ticket, "text": text}}
               for ticket, text in [("T-1", "We run Linux."), ("T-2", "Backups fail.")]]
    if kind == "Memory":
        with Memory(InMemoryMemories(), ask=jev) as memory:
            routed = [memory.ask(state, ROUTE).answers["team"].choice for state in tickets]
            kept = memory.memories("C-7")
    else:
        async def served() -> tuple[list[str], list[dict]]:
            async with AsyncMemory(InMemoryMemories(), ask=jev) as memory:
                routed = [(await memory.ask(state, ROUTE)).answers["team"].choice
                          for state in tickets]
                return routed, await memory.memories("C-7")
        routed, kept = asyncio.run(served())
    kept = [ticket_id_of(memory) for memory in kept]
    assert (routed, kept) == (["selfhosted_linux", "selfhosted_linux"], ["T-1"]), (
        f"{kind}(ask=MadeUpJev(...)) must ask the stand-in as it asks a Jev, its ask_async "
        f"(memorybook/serving.py, asking()): routed {routed}, kept {kept}")


def test_an_answer_programmed_for_a_question_comes_before_the_first_forms_function():
    jev = MadeUpJev(lambda state, questions: {"team": "cloud_ops", "spam": 0.25})
    response = jev.answer("team", "billing").ask(STATE, {**ROUTE, **SPAM})
    answered = (response.answers["team"].choice, response.answers["spam"].noul)
    assert answered == ("billing", 0.25), (
        f"MadeUpJev must answer a question with what answer() programmed for it, and the rest "
        f"with the function it was made with: {answered}")


@pytest.mark.parametrize(("questions", "example", "allowed"), [
    (ROUTE, ".answer('team', 'cloud_ops')", f"one of its options {OPTIONS}"),
    (GATE, ".answer('remember', 0.9)", "a number in [0, 1]"),
    (URGENCY, ".answer('urgency', 0)", "one of its levels 0 to 2"),
], ids=["Choice", "Noul", "Score"])
@pytest.mark.parametrize("programmed", [{}, {"other": 0.5}], ids=["nothing", "another"])
def test_a_question_not_programmed_fails_at_once_naming_it_and_how_to_program_it(
        questions, example, allowed, programmed):
    jev = MadeUpJev(programmed)
    with pytest.raises(MadeUpAnswerError) as refused:
        jev.ask(STATE, questions)
    message, [question_id] = str(refused.value), questions
    assert isinstance(refused.value, MemorybookError) and "\n" not in message and (
        repr(question_id) in message and example in message and allowed in message), (
        f"MadeUpJev.ask() (memorybook/stand_in.py) must refuse a question it has no answer for "
        f"in one line naming it and how to program it ({example}, {allowed}): {message}")
    assert jev.refusals == [refused.value], (
        f"MadeUpJev must note each refusal in `refusals`, for the made_up_jev fixture to "
        f"report one the code under test caught: {jev.refusals}")


@pytest.mark.parametrize("questions", [{**ROUTE, **GATE}, AS_DICTS], ids=["objects", "dicts"])
@pytest.mark.parametrize(("answers", "question_id", "allowed"), [
    ({"team": "billing"}, "remember", "a number in [0, 1]"),
    ({"remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": "Billing", "remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": 3, "remember": 0.9}, "team", "one of its options ['cloud_ops', "),
    ({"team": {"billing": 0.7}, "remember": 0.9}, "team", "a dict of their probabilities"),
    ({"team": {"billing": 1.0, "bills": 0.0}, "remember": 0.9}, "team",
     "a dict of their probabilities"),
    ({"team": "billing", "remember": 1.5}, "remember", "a number in [0, 1]"),
    ({"team": "billing", "remember": True}, "remember", "a number in [0, 1]"),
    ({"team": "billing", "remember": "0.9"}, "remember", "a number in [0, 1]"),
], ids=["unanswered", "unanswered choice", "not an option", "not a string",
        "probabilities short of 1", "not an option's probability", "above 1", "a bool",
        "a string"])
@pytest.mark.parametrize("form", ["one function", "programmed"])
def test_answers_that_do_not_fit_the_questions_are_refused_naming_the_question(
        questions, answers, question_id, allowed, form):
    jev = (MadeUpJev(lambda state, asked: answers) if form == "one function"
           else MadeUpJev(answers))
    with pytest.raises(MadeUpAnswerError) as refused:
        jev.ask(STATE, questions)
    message = str(refused.value)
    assert isinstance(refused.value, MemorybookError) and "\n" not in message
    assert repr(question_id) in message and allowed in message, (
        f"MadeUpJev.ask() (memorybook/stand_in.py) must check each made-up answer against the "
        f"question asked and say in one line which question and what it may be: {message}")


def test_the_first_forms_function_answering_a_question_not_asked_is_refused():
    answers = {"team": "billing", "remember": 0.9, "urgent": 0.2}
    with pytest.raises(MadeUpAnswerError) as refused:
        MadeUpJev(lambda state, asked: answers).ask(STATE, {**ROUTE, **GATE})
    assert "'urgent'" in str(refused.value) and "the questions asked" in str(refused.value), (
        f"MadeUpJev must refuse an answer function's answer to a question not asked, naming "
        f"it: {refused.value}")


def test_a_box_question_is_refused_saying_to_replay_jevs_answers():
    box = {"logo": Box(instructions="Where is the logo?")}
    with pytest.raises(MadeUpAnswerError) as refused:
        MadeUpJev({"logo": 0.5}).ask(STATE, box)
    assert "'logo'" in str(refused.value) and "replay a recording" in str(refused.value), (
        f"MadeUpJev must say it answers no Box question, and what to do instead: {refused.value}")


@pytest.mark.parametrize(("questions", "answers"), [
    ({**ROUTE, **GATE, **URGENCY}, {"team": "billing", "remember": 0.25, "urgency": 2}),
    ({**ROUTE, **GATE, **URGENCY}, {"team": {"billing": 0.7, "general": 0.3}, "remember": 1,
                                    "urgency": {0: 0.2, 2: 0.8}}),
    ({"team": Choice(criteria={"only": "the one option"}), **SPAM}, {"team": "only", "spam": 0}),
], ids=["fixed", "probabilities", "one option"])
def test_every_response_is_a_whole_sdk_response_for_choice_noul_and_score(questions, answers):
    response = MadeUpJev(answers).ask(STATE, questions)
    entry = response.model_dump(mode="json")
    as_sent = {question_id: question.model_dump(mode="json", exclude_none=True)
               for question_id, question in questions.items()}
    assert isinstance(response, SystemOneResponse) and answer_problem(entry, as_sent) is None, (
        f"MadeUpJev's response must be one a recording would accept for these questions "
        f"(memorybook/recording/checks.py): {answer_problem(entry, as_sent)}")
    assert entry["model"] == MadeUpJev.MODEL and entry["usage"] == {
        "input_tokens": 0, "output_tokens": 0}, f"model and usage must be there: {entry}"
    as_read = SystemOneResponse.model_validate_json(response.model_dump_json())
    assert as_read.model_dump() == response.model_dump(), (
        f"the response must read back, the same, as the SDK reads Jev's: {as_read}")
    if "urgency" in questions:
        score = response.answers["urgency"]
        levels = dict(enumerate(questions["urgency"].criteria))
        expected = sum(level * chance for level, chance in score.probabilities.items())
        assert score.legend == levels and set(score.probabilities) == set(levels) and (
            abs(sum(score.probabilities.values()) - 1) < 0.01
            and score.score == round(expected, 2)), (
            f"a made-up Score answer must carry every level in its legend and probabilities, "
            f"its score the expected level: {score}")


@pytest.mark.parametrize(("given", "choice", "confidence"), [
    ("billing", "billing", 1.0),
    ({"billing": 0.7, "general": 0.3}, "billing", 0.65),
    ({"general": 0.5, "billing": 0.5}, "billing", 0.42),
], ids=["an option", "probabilities", "a tie: the first option"])
def test_a_choice_is_the_most_probable_option_with_the_apis_confidence(given, choice,
                                                                        confidence):
    answer = MadeUpJev({"team": given}).ask(STATE, ROUTE).answers["team"]
    assert (answer.choice, answer.confidence) == (choice, confidence) and set(
        answer.probabilities) == set(OPTIONS), (
        f"a made-up Choice answer must choose the most probable option (the first of equals), "
        f"its confidence (n * p - 1) / (n - 1) as the API's, every option in its probabilities: "
        f"{answer}")


def test_every_repr_and_str_of_a_made_up_response_says_it_is_made_up():
    jev = MadeUpJev({"team": "billing", "remember": 0.25, "urgency": 1})
    response = jev.ask(STATE, {**ROUTE, **GATE, **URGENCY})
    shown = {"repr(response)": repr(response), "str(response)": str(response),
             "repr(stand_in)": repr(jev)}
    for question_id, answer in response.answers.items():
        shown[f"repr of {question_id!r}"], shown[f"str of {question_id!r}"] = (
            repr(answer), str(answer))
    unmarked = {how: text for how, text in shown.items()
                if not text.startswith(("MadeUp", "model='made-up-stand-in'"))}
    assert not unmarked, (
        f"every repr and str of a made-up response must say it is made up, first "
        f"(memorybook/stand_in.py's MadeUp classes): {unmarked}")


def test_log_lines_that_show_a_made_up_answer_say_it_is_made_up(caplog):
    """The library's lines that quote an answer: a failed gate's, whose error quotes it."""
    jev = MadeUpJev({"team": "enterprise_desk", "remember": 1.25})  # 1.25: no probability

    async def one_ticket() -> None:
        gates = PendingGates()
        await ask_with_memory_async(STATE, ROUTE, InMemoryMemories(), gates=gates,
                                    ask=jev.ask_async)
        await gates.drain()

    with caplog.at_level(logging.DEBUG):  # every logger, every level
        asyncio.run(one_ticket())
    quoting = [record.getMessage() for record in caplog.records
               if "1.25" in record.getMessage() or "enterprise_desk" in record.getMessage()]
    assert quoting, (
        f"a gate refused by MadeUpJev must be logged, quoting its made-up answer (memorybook/"
        f"wrapper.py, keep_if_worth_it()): {[r.getMessage() for r in caplog.records]}")
    unmarked = [line for line in quoting if "made-up" not in line]
    assert not unmarked, (
        f"a log line that shows a made-up answer must say it is made up: MadeUpAnswerError's "
        f"messages (memorybook/stand_in.py) call it a made-up answer: {unmarked}")


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
    jev = MadeUpJev({"team": "billing"})
    jev.ask(STATE, as_dict)
    assert jev.calls[0]["questions"] == ROUTE, (
        f"MadeUpJev must note each call's questions as Jev reads them: {jev.calls}")
