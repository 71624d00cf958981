"""The set of calls the collection makes: what a live recording records and the rebuild answers.

Every call the notebooks make to System One comes from the official page's probe experiment and
reconciliation (dev/memorybook_dev/experiments.py), run for each customer. One customer's calls
never depend on another's, so a recording makes them side by side, one thread per customer.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from tools.ctrl_c import in_background, wait_for_all


def make_every_call(customers: Sequence[str] | None = None, ask: Callable | None = None) -> None:
    """Make every call the collection makes for these customers (None: all), in the official
    run's order: the probe experiment, then the reconciliation, from no memories. It prints what
    they print. `ask` asks Jev: by default the example's Jev (memorybook.example), on the
    recording $MEMORYBOOK_RECORDING names when it is first used.
    """
    from memorybook import InMemoryMemories
    from memorybook.example import CUSTOMERS
    from memorybook.example import ask as example_ask
    from memorybook_dev.experiments import probe_experiment, reconcile

    chosen = tuple(CUSTOMERS) if customers is None else customers
    memories, asked = InMemoryMemories(), {"ask": ask or example_ask}
    probe_experiment(memories, chosen, **asked)
    reconcile(memories, chosen, **asked)


def start_every_call(customers: Sequence[str] | None = None) -> list[Future]:
    """Start every call the collection makes, one thread per customer."""
    importlib.import_module("memorybook_dev.experiments")  # here, before the threads use it
    from memorybook.example import CUSTOMERS

    return [in_background(make_every_call, [customer]) for customer in customers or CUSTOMERS]


def run_every_call(customers: Sequence[str] | None = None) -> None:
    """Make every call the collection makes, printing nothing; the first failure is raised now."""
    with contextlib.redirect_stdout(io.StringIO()):
        wait_for_all(start_every_call(customers))
