"""pytest fixtures for an app's tests: Jev's answers replayed from the app's own recording.

    # the app's conftest.py
    from memorybook.testing import jev  # noqa: F401  (or pytest_plugins = ["memorybook.testing"]
                                        #  in the root conftest.py)

    @pytest.fixture(scope="session")
    def jev_recording():
        return Path(__file__).parent / "recording.json"  # the app's own, committed

    def test_routes(jev):
        response = ask_with_memory(state, ROUTE, memories, ask=jev.ask)

The `jev` fixture replays: a call the recording lacks fails at once with the explanation and how
to record it, and nothing is sent, key or not (VCR-style libraries call this mode "none"). To
record what the tests need, once, with a key and outside CI:

    MEMORYBOOK_RECORD_MODE=record TYPESAFE_API_KEY=... pytest

Each call the recording lacks is then asked live and its answer appended to the recording; commit
it. For tickets of the app's own, which no recording answers, the `made_up_jev` fixture gives a
stand-in the test programs (memorybook/stand_in.py), with no key and no recording:

    def test_an_invoice_goes_to_billing(made_up_jev):
        made_up_jev.answer("team", "billing").answer("remember", 0.1)
        response = ask_with_memory(state, ROUTE, memories, ask=made_up_jev.ask)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memorybook.jev import Jev, Mode
from memorybook.settings import RECORD_MODE_ENV, RECORDING_ENV, ConfigError, Settings
from memorybook.stand_in import MadeUpAnswerError, MadeUpJev


def settings_for_tests() -> Settings:
    """The environment's settings, read as a fixture needs them; an unusable one stops the run in
    one line naming it."""
    try:
        return Settings.from_environment()
    except ConfigError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture(scope="session")
def jev_recording() -> Path:
    """The app's recording: the settings' ($MEMORYBOOK_RECORDING), unless the app's conftest
    overrides this fixture with its own file (the usual way: a path beside the tests,
    committed)."""
    named = settings_for_tests().recording
    if named is None:
        raise pytest.UsageError(
            f"memorybook.testing's `jev` fixture needs the app's recording: override the "
            f"`jev_recording` fixture in conftest.py with its path, or set {RECORDING_ENV}.")
    return named


@pytest.fixture(scope="session")
def jev(jev_recording: Path) -> Jev:
    """A Jev on the app's recording, with the settings the environment holds when the session
    first asks for it: replay; record mode with $MEMORYBOOK_RECORD_MODE=record and a key (never
    in CI)."""
    settings = settings_for_tests()
    requested = settings.record_mode or Mode.REPLAY
    if requested not in (Mode.REPLAY, Mode.RECORD):
        raise pytest.UsageError(
            f"{RECORD_MODE_ENV}={str(requested)!r}: tests replay the app's recording, or record "
            f"into it (`record`); live mode writes no recording, so nothing it asks could "
            f"replay.")
    try:
        return Jev(jev_recording, mode=requested, settings=settings)
    except ConfigError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture
def made_up_jev() -> Iterator[MadeUpJev]:
    """A MadeUpJev for one test, with nothing programmed: the test answers each question its
    code asks, `made_up_jev.answer("team", "billing")`, or the call fails at once, naming the
    question and how to program it. A refusal that the code under test caught (the async
    wrapper logs a failed gate and carries on) fails the test at its teardown; a test that
    expects one empties `made_up_jev.refusals`."""
    stand_in = MadeUpJev()
    yield stand_in
    # pytest keeps the test's own failure in sys.last_value: a refusal that failed the test is
    # not said twice.
    failed = getattr(sys, "last_value", None)
    caught = [refusal for refusal in stand_in.refusals if not _behind(failed, refusal)]
    if caught:
        more = f" (and {len(caught) - 1} more)" if len(caught) > 1 else ""
        pytest.fail(f"made_up_jev refused a call that the code under test caught{more}: "
                    f"{caught[0]}", pytrace=False)


def _behind(error: BaseException | None, refusal: MadeUpAnswerError) -> bool:
    """Whether `refusal` is `error`, or what it was raised from or while handling."""
    seen = set()
    while error is not None and id(error) not in seen:
        if error is refusal:
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
