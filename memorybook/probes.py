"""Generated from notebooks/04_probe_experiment.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""

__all__ = [
    "PROBES", "send_probes", "probe_experiment",
]


from memorybook.gate import as_memory, remember_probability, worth_keeping
from memorybook.memory import (
    MEMORIES,
    ask_with_memory,
    customer_id,
    describe_memories,
    forget_customers,
)
from memorybook.routing import CUSTOMERS, EARLIER, ROUTE, later_state

PROBES = {"Slow dashboards": 0, "More seats": 2}  # later messages to send after each ticket


def send_probes(customer: str, step: str, memories=MEMORIES) -> list[dict]:
    """Send one customer's probe messages through the wrapper; print and return the answers."""
    answers = []
    for subject, message_index in PROBES.items():
        state = later_state(customer, message_index)
        team = ask_with_memory(state, ROUTE, memories).answers["team"]
        probability = team.probabilities[team.choice]
        print(f"      {subject:<16} -> {team.choice:<19} {probability:.2f}")
        answers.append({"customer": customer, "step": step, "message": subject,
                        "team": team.choice, "probability": probability})
    return answers


def probe_experiment(customers=tuple(CUSTOMERS), memories=MEMORIES) -> list[dict]:
    """Each earlier ticket through the wrapper, in order, with both probes before and after it.

    The customers start from no memories. Each customer's calls depend only on their own
    tickets, so `customers` can pick some.
    """
    forget_customers(customers, memories)
    answers = []
    for customer in customers:
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, "start", memories)
    for state in EARLIER:
        customer, ticket = customer_id(state), state["ticket"]
        if customer not in customers:
            continue
        response = ask_with_memory(state, ROUTE, memories)
        p = remember_probability(as_memory(state, ROUTE, response))  # cached: the wrapper asked
        verdict = "saved" if worth_keeping(p) else "not saved"
        print(f"\n{customer} {ticket['id']}  {response.answers['team'].choice:<19} "
              f"P(remember) {p:.2f}  {verdict}")
        print(f"    {ticket['messages'][0]['text'][:84]}")
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, f"{ticket['id']} {verdict}", memories)
    return answers
