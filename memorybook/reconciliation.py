"""Generated from notebooks/05_reconciliation.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""

__all__ = [
    "EXPECTED_TEAM", "marked", "reconcile",
]


from memorybook.memory import MEMORIES, ask_with_memory
from memorybook.routing import CUSTOMERS, DATA, ROUTE, ask, later_state

EXPECTED_TEAM = DATA["expected_team"]  # customer id -> message subject -> team


def marked(answer, expected: str) -> str:
    """A tick or a cross, the chosen team and the probability Jev gave it."""
    mark = "✓" if answer.choice == expected else "✗"
    return f"{mark} {answer.choice} {answer.probabilities[answer.choice]:.2f}"


def reconcile(customers=tuple(CUSTOMERS), memories=MEMORIES) -> list[dict]:
    """Route each later message plainly and with memory; print the comparison, return its rows."""
    rows = []
    print(f"{'customer':<9}{'message':<17}{'expected':<20}{'plain Jev':<27}{'with memory':<27}")
    for customer in customers:
        for index, message in enumerate(DATA["later_messages"]):
            state = later_state(customer, index)
            expected = EXPECTED_TEAM[customer][message["subject"]]
            plain = ask(state, ROUTE).answers["team"]
            remembered = ask_with_memory(state, ROUTE, memories).answers["team"]
            print(f"{customer:<9}{message['subject']:<17}{expected:<20}"
                  f"{marked(plain, expected):<27}{marked(remembered, expected):<27}")
            rows.append({"customer": customer, "message": message["subject"], "expected": expected,
                         "plain": plain, "memory": remembered})
    plain_right = sum(row["plain"].choice == row["expected"] for row in rows)
    memory_right = sum(row["memory"].choice == row["expected"] for row in rows)
    print(f"\nExpected routes: {plain_right}/{len(rows)} without memory, "
          f"{memory_right}/{len(rows)} with memory.")
    return rows
