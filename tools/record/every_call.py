"""The set of calls the collection makes: what a live recording records and the rebuild answers.

Every call the notebooks make to System One comes from notebook 1's probe experiment and
reconciliation, run for each customer. One customer's calls never depend on
another's, so a recording makes them side by side, one thread per customer.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Sequence
from concurrent.futures import Future

from tools.ctrl_c import in_background, wait_for_all


def make_every_call(customers: Sequence[str] | None = None) -> None:
    """Make every call the collection makes for these customers (None: all), in the official
    run's order: the probe experiment, then the reconciliation. It prints what they print.

    Imports the notebooks' modules, so $MEMORYBOOK_RECORDING must name the recording before.
    """
    from memorybook.memory_system import CUSTOMERS, probe_experiment, reconcile

    chosen = tuple(CUSTOMERS) if customers is None else customers
    probe_experiment(chosen)
    reconcile(chosen)


def start_every_call(customers: Sequence[str] | None = None) -> list[Future]:
    """Start every call the collection makes, one thread per customer."""
    importlib.import_module("memorybook.memory_system")  # here, before the threads use it
    from memorybook.memory_system import CUSTOMERS

    return [in_background(make_every_call, [customer]) for customer in customers or CUSTOMERS]


def run_every_call(customers: Sequence[str] | None = None) -> None:
    """Make every call the collection makes, printing nothing; the first failure is raised now."""
    with contextlib.redirect_stdout(io.StringIO()):
        wait_for_all(start_every_call(customers))
