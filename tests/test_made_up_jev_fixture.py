"""memorybook.testing's `made_up_jev` fixture, in an app's own pytest run (pytester, in this
process): reached by either way an app takes it, a new stand-in for each test, and a refusal the
code under test caught (the async wrapper logs a failed gate and carries on) failing the test
at its teardown, where one that failed the test is not said twice."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

ROUTED = """
    import asyncio

    from memorybook import InMemoryMemories, PendingGates, ask_with_memory, ask_with_memory_async
    from memorybook.example import ROUTE

    STATE = {"customer": {"id": "C-7"}, "ticket": {"id": "T-9001", "text": "We run Linux."}}


    def routed_async(made_up_jev):
        async def one_ticket():
            gates = PendingGates()
            reply = await ask_with_memory_async(STATE, ROUTE, InMemoryMemories(), gates=gates,
                                                ask=made_up_jev.ask_async)
            await gates.drain()
            return reply.answers["team"].choice
        return asyncio.run(one_ticket())
"""


def app_run(pytester: pytest.Pytester, tests: str, how: str = "conftest"):
    """pytest, in this process, on an app's folder taking the fixture `how` its README says."""
    if how == "conftest":
        pytester.makeconftest("from memorybook.testing import made_up_jev  # noqa: F401\n")
        plugins = ""
    else:
        plugins = 'pytest_plugins = ["memorybook.testing"]\n'
    pytester.makepyfile(test_app=plugins + textwrap.dedent(ROUTED) + textwrap.dedent(tests))
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


def outcomes(ran) -> dict[str, int]:
    """How the app's tests ended, warnings left out: plugins this process loaded before (say
    hypothesis') may warn in the app's run too."""
    return {how: count for how, count in ran.parseoutcomes().items()
            if how in ("passed", "failed", "errors")}


@pytest.mark.parametrize("how", ["conftest", "pytest_plugins"])
def test_each_test_gets_a_stand_in_of_its_own_by_either_way_an_app_takes_it(pytester, how):
    ran = app_run(pytester, """
        def test_billing(made_up_jev):
            made_up_jev.answer("team", "billing").answer("remember", 0.1)
            assert routed_async(made_up_jev) == "billing"


        def test_nothing_programmed_is_left_from_the_test_before(made_up_jev):
            assert made_up_jev.calls == [] and "none programmed" in repr(made_up_jev)
    """, how)
    assert ran.ret == 0, (
        f"an app's tests taking `made_up_jev` by {how} (README.md, 'Use it in an app') must "
        f"each get a new MadeUpJev (memorybook/testing.py):\n{ran.stdout.str()}")


def test_a_refusal_the_code_under_test_caught_fails_the_test_at_teardown(pytester):
    ran = app_run(pytester, """
        def test_routes_without_programming_the_gate(made_up_jev):
            made_up_jev.answer("team", "billing")
            assert routed_async(made_up_jev) == "billing"  # the gate's refusal is only logged
    """)
    said = ran.stdout.str()
    assert outcomes(ran) == {"passed": 1, "errors": 1} and (
        "made_up_jev refused a call that the code under test caught" in said
        and ".answer('remember', 0.9)" in said), (
        "the async wrapper logs a gate that failed and carries on: `made_up_jev` "
        "(memorybook/testing.py) must then fail the test at teardown, naming the question "
        f"and how to program it:\n{said}")


def test_a_refusal_that_failed_the_test_is_not_said_again_at_teardown(pytester):
    ran = app_run(pytester, """
        def test_routes_without_programming_the_gate(made_up_jev):
            made_up_jev.answer("team", "billing")
            ask_with_memory(STATE, ROUTE, InMemoryMemories(), ask=made_up_jev.ask)
    """)
    said = ran.stdout.str()
    assert outcomes(ran) == {"failed": 1} and "'remember'" in said, (
        "a refusal that failed the test (ask_with_memory() lets it through) must fail it once, "
        "not again at `made_up_jev`'s teardown (memorybook/testing.py, sys.last_value):\n"
        f"{said}")


def test_a_test_expecting_a_refusal_empties_the_refusals_and_passes(pytester):
    ran = app_run(pytester, """
        import pytest
        from memorybook import MadeUpAnswerError


        def test_an_unprogrammed_gate_is_refused(made_up_jev):
            made_up_jev.answer("team", "billing")
            with pytest.raises(MadeUpAnswerError, match="'remember'"):
                ask_with_memory(STATE, ROUTE, InMemoryMemories(), ask=made_up_jev.ask)
            made_up_jev.refusals.clear()
    """)
    assert ran.ret == 0, (
        "a test that expects a refusal and empties `made_up_jev.refusals` must pass, as "
        f"memorybook/testing.py's fixture says:\n{ran.stdout.str()}")
