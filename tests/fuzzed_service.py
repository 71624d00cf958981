"""The service as uvicorn runs it, on a made-up Jev, for the tests that reach it over a loopback
port (tests/test_service_contract.py): `uvicorn --factory tests.fuzzed_service:create_app`, with
$MEMORYBOOK_STORE_URL naming a store of the test's own. Every ticket is routed "general" and
kept by the gate; nothing is asked of Jev or written to a recording."""

from __future__ import annotations

from fastapi import FastAPI

from memorybook import MadeUpJev
from memorybook.service import create_app as service


def made_up_answers(state: dict, questions: dict) -> dict:
    return {"remember": 0.9} if "remember" in questions else {"team": "general"}


def create_app() -> FastAPI:
    return service(ask=MadeUpJev(made_up_answers).ask_async)
