"""Generated from notebooks/02_memory_gate.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""

__all__ = [
    "REMEMBER_AT", "MEMORY_KEY", "answer_text", "as_memory", "GATE", "remember_probability",
    "worth_keeping",
]


from memorybook.routing import ask


# pattern: what a memory holds
from typesafe_sdk import Noul, NoulCriteria, SystemOneResponse

REMEMBER_AT = 0.5  # keep a ticket once P(lasting fact) reaches this; tune it on your own traffic
MEMORY_KEY = "earlier_tickets_from_this_customer"  # where saved memories go in the state


def answer_text(question, answer):
    """What an answer says, in words: the chosen option's description, or the number itself."""
    if answer.type == "choice":
        return question.criteria[answer.choice]
    return answer.noul if answer.type == "noul" else answer.score


def as_memory(state: dict, questions: dict, response: SystemOneResponse) -> dict:
    """The request as it arrived, with Jev's answer to each of its questions."""
    answered = {
        question.instructions: answer_text(question, response.answers[question_id])
        for question_id, question in questions.items()
    }
    return {"request": state, "jev_answered": answered}


from memorybook.replay import read_threshold_from

read_threshold_from(lambda: REMEMBER_AT)  # read when a miss is explained


# pattern: the gate
GATE = {
    "remember": Noul(
        instructions=(
            "In `request.ticket`, does the thread state a lasting fact about the customer that "
            "should change how their future, unrelated tickets are handled? Count what the "
            "customer or our support staff wrote in `request.ticket`. `jev_answered` shows how "
            "the ticket was routed, which may rely on things learned earlier: do not count "
            "anything it says or implies."
        ),
        criteria=NoulCriteria(
            true=(
                "Yes: in `request.ticket` the customer or our support staff state something "
                "about the customer that stays true after this ticket, such as the product "
                "edition or operating system they run, their plan or contract, or a standing "
                "preference."
            ),
            false=(
                "No: `request.ticket` only contains things specific to this one ticket or "
                "moment, such as a one-off request, today's schedule, or the device they "
                "happen to be typing on; or the lasting fact appears only in `jev_answered`."
            ),
        ),
    ),
}


def remember_probability(memory: dict) -> float:
    """P(the request states a lasting fact about the customer), with Jev's answer as context."""
    return ask(memory, GATE).answers["remember"].noul


def worth_keeping(probability: float) -> bool:
    """The gate's verdict. REMEMBER_AT is read at every call, so a new value applies at once."""
    return probability >= REMEMBER_AT
