"""The notebooks show the official page's published figures, character for character.

nbval proves a fresh run prints what the notebooks store; these tests prove that what they store
is what the official page publishes. Together: a fresh run reproduces the page.
"""

import pytest

from tests.helpers import PUBLISHED, notebook, stdout_text

PUBLISHED_OUTPUTS = [
    ("01", "first_ticket.txt"),
    ("01", "baseline.txt"),
    ("01", "probe_table.txt"),
    ("01", "reconciliation_table.txt"),
    ("03", "probe_table.txt"),
    ("04", "reconciliation_table.txt"),
    ("06", "probe_table.txt"),  # the same run, with memories kept in the encrypted store
    ("06", "reconciliation_table.txt"),
]


@pytest.mark.parametrize(("notebook_number", "published"), PUBLISHED_OUTPUTS)
def test_notebook_prints_the_published_output(notebook_number, published):
    expected = (PUBLISHED / published).read_text(encoding="utf-8")
    assert expected in stdout_text(notebook(notebook_number))


SHOWN = [
    # the gate's two published verdicts on the first tickets
    ("02", "C-1042 T-101  routed to selfhosted_windows  P(remember) 0.97  saved"),
    ("02", "C-2210 T-102  routed to general             P(remember) 0.98  saved"),
    ("01", "Expected routes: 3/6 without memory, 6/6 with memory."),
    ("04", "Expected routes: 3/6 without memory, 6/6 with memory."),
    # provenance and cost, computed from the recording
    ("07", "31 calls to jev-1.14.0 (the published result of 2026-10-29, rebuilt from the "
           "official page's figures)"),
    ("07", "read 21,456 input tokens: $0.0009 at $42 per billion"),
    # the store: a separate process routes from it alone; forgetting; nothing in plaintext
    ("06", "memories found: T-101, T-105\nslow dashboards -> selfhosted_windows 0.98"),
    ("06", "deleted: T-105 - Sandbox environment\nC-1042 now remembers: T-101"),
    ("06", "'Windows Server 2022' in the database files: False"),
]


@pytest.mark.parametrize(("notebook_number", "text"), SHOWN)
def test_notebook_shows(notebook_number, text):
    assert text in stdout_text(notebook(notebook_number))
