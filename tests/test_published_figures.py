"""The notebooks show the official page's published figures, character for character.

nbval proves a fresh run prints what the notebooks store; these tests prove that what they store
is what the official page publishes. Together: a fresh run reproduces the page.
"""

import pytest

from tests.helpers import PUBLISHED, notebook, stdout_text

PUBLISHED_OUTPUTS = [
    ("01", "first_ticket.txt"),
    ("01", "baseline.txt"),
    ("04", "probe_table.txt"),
    ("05", "reconciliation_table.txt"),
    ("07", "probe_table.txt"),  # the same run, with memories kept in the encrypted store
    ("07", "reconciliation_table.txt"),
]


@pytest.mark.parametrize(("notebook_number", "published"), PUBLISHED_OUTPUTS)
def test_notebook_prints_the_published_output(notebook_number, published):
    expected = (PUBLISHED / published).read_text(encoding="utf-8")
    assert expected in stdout_text(notebook(notebook_number))


def test_the_gate_notebook_shows_the_two_published_verdicts():
    printed = stdout_text(notebook("02"))
    assert "C-1042 T-101  routed to selfhosted_windows  P(remember) 0.97  saved" in printed
    assert "C-2210 T-102  routed to general             P(remember) 0.98  saved" in printed


def test_the_wrapper_notebook_shows_plain_and_remembered_routes():
    printed = stdout_text(notebook("03"))
    assert "plain ask()        -> SystemOneResponse: cloud_ops 0.55" in printed
    assert "ask_with_memory()  -> SystemOneResponse: selfhosted_windows 0.98" in printed
    assert "C-1042 memories: T-101, T-105\nC-2210 memories: T-102" in printed


def test_the_headline_stands_in_the_reconciliation():
    assert "Expected routes: 3/6 without memory, 6/6 with memory." in stdout_text(notebook("05"))


def test_the_cost_line_is_computed_from_the_recording():
    printed = stdout_text(notebook("01"))
    origin = "31 calls to jev-1.14.0 (recorded 2026-10-29, rebuilt from the published figures)"
    assert origin in printed
    assert "read 21,456 input tokens: $0.0009 at $42 per billion" in printed


def test_a_separate_process_routes_from_the_store_alone():
    printed = stdout_text(notebook("07"))
    assert "memories found: T-101, T-105\nslow dashboards -> selfhosted_windows 0.98" in printed
    assert "deleted: T-105 - Sandbox environment\nC-1042 now remembers: T-101" in printed
    assert "'Windows Server 2022' in the database files: False" in printed
