"""The loopback System One server, driven by the real TypeSafe SDK client over 127.0.0.1.

Run from the repository root: ``python -m pytest tests/test_loopback_server.py``.
"""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from cooksafe.cache import JsonCache
from typesafe_sdk import (
    RetryPolicy,
    TypeSafeAPIConnectionError,
    TypeSafeAPIError,
    TypeSafeAPIResponseValidationError,
    TypeSafeAPITimeoutError,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafeInternalServerError,
    TypeSafeNotFoundError,
    TypeSafeRateLimitError,
    TypeSafeUnprocessableEntityError,
)

from tests.helpers import REPO_ROOT
from tools import loopback_replies
from tools.loopback_server import LoopbackSystemOne, closed_port, recording_key

KEY = "test-key-123"
MODEL = "jev-latest"  # the alias requested
RECORDED_MODEL = "jev-1.14.0"  # the version that answered
NO_RETRY = RetryPolicy(max_retries=0)

# Short enough for a literal cooksafe key.
NOUL_STATE = "Refund?"
NOUL_QUESTIONS = {"refund": {"type": "noul", "instructions": "Is a refund asked for?"}}
NOUL_RESPONSE = {
    "model": RECORDED_MODEL,
    "usage": {"input_tokens": 21, "output_tokens": 1},
    "answers": {"refund": {"type": "noul", "noul": 0.93}},
}
# Long enough (and non-ASCII) to be stored under its sha256 digest.
CHOICE_STATE = {
    "ticket": {
        "id": "T-101",
        "text": "Hi, we run the self-hosted edition. How do I add an admin? Merci, José",
    }
}
CHOICE_QUESTIONS = {
    "topic": {
        "type": "choice",
        "instructions": "What is `ticket.text` about?",
        "criteria": {"billing": None, "admin": "User and role management", "other": None},
    }
}
CHOICE_RESPONSE = {
    "model": RECORDED_MODEL,
    "usage": {"input_tokens": 58, "output_tokens": 1},
    "answers": {
        "topic": {
            "type": "choice",
            "choice": "admin",
            "confidence": 0.87,
            "probabilities": {"billing": 0.03, "admin": 0.91, "other": 0.06},
        }
    },
}


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """A recording written by cooksafe itself, the way the cookbook's ``_system_one`` records."""
    path = tmp_path / "json_cache.json"
    cache = JsonCache(path)
    live = {
        (MODEL, json.dumps(NOUL_STATE), json.dumps(NOUL_QUESTIONS)): NOUL_RESPONSE,
        (MODEL, json.dumps(CHOICE_STATE), json.dumps(CHOICE_QUESTIONS)): CHOICE_RESPONSE,
    }

    @cache
    def _system_one(model: str, state_json: str, questions_json: str) -> dict:
        return live[(model, state_json, questions_json)]

    for args in live:
        _system_one(*args)
    return path


def client(base_url: str, **options) -> TypeSafeClient:
    return TypeSafeClient(
        api_key=KEY, base_url=base_url, compression=options.pop("compression", False), **options
    )


def test_cooksafe_keys_are_what_the_server_computes(recording: Path) -> None:
    keys = set(json.loads(recording.read_text()))
    short = recording_key(MODEL, NOUL_STATE, NOUL_QUESTIONS)
    long = recording_key(MODEL, CHOICE_STATE, CHOICE_QUESTIONS)
    assert keys == {short, long}
    assert short.startswith("_system_one|jev-latest|")
    assert re.fullmatch(r"[0-9a-f]{64}", long)


def test_recorded_calls_replay_answers_and_model(recording: Path) -> None:
    with LoopbackSystemOne(recording) as server, client(server.base_url) as sdk:
        choice = sdk.system_one(CHOICE_STATE, CHOICE_QUESTIONS, model=MODEL)
        noul = sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert choice.model == noul.model == RECORDED_MODEL
    assert choice.choices["topic"].choice == "admin"
    assert choice.choices["topic"].probabilities == {"billing": 0.03, "admin": 0.91, "other": 0.06}
    assert choice.usage.input_tokens == 58
    assert noul.nouls["refund"].noul == 0.93
    assert (server.hits(), server.misses()) == (2, 0)
    first = server.requests[0]
    assert (first["method"], first["path"], first["status"]) == ("POST", "/v1/systemone", 200)
    assert first["headers"]["authorization"] == f"Bearer {KEY}"
    assert first["body"] == {"state": CHOICE_STATE, "model": MODEL, "questions": CHOICE_QUESTIONS}
    assert list(first["body"]) == ["state", "model", "questions"]


def test_miss_is_a_loud_404_naming_the_key(recording: Path) -> None:
    questions = {"refund": {"type": "noul", "instructions": "Is a refund requested?"}}
    with (
        LoopbackSystemOne(recording) as server,
        client(server.base_url) as sdk,
        pytest.raises(TypeSafeNotFoundError) as caught,
    ):
        sdk.system_one(NOUL_STATE, questions, model=MODEL)
    assert (server.hits(), server.misses(), len(server.requests)) == (0, 1, 1)
    assert caught.value.status == 404
    assert caught.value.body["error"]["key"] == recording_key(MODEL, NOUL_STATE, questions)


def test_reordered_keys_miss(recording: Path) -> None:
    """The key is the JSON text, so the same question with its keys reordered is not recorded."""
    reordered = {"refund": {"instructions": "Is a refund asked for?", "type": "noul"}}
    with (
        LoopbackSystemOne(recording) as server,
        client(server.base_url) as sdk,
        pytest.raises(TypeSafeNotFoundError),
    ):
        sdk.system_one(NOUL_STATE, reordered, model=MODEL)
    assert server.misses() == 1


@pytest.mark.parametrize(
    ("failure", "error_type"),
    [
        ("unauthorized", TypeSafeAuthenticationError),
        ("bad_request", TypeSafeBadRequestError),
        ("unprocessable", TypeSafeUnprocessableEntityError),
        ("rate_limit", TypeSafeRateLimitError),
        ("server_error", TypeSafeInternalServerError),
        ("malformed", TypeSafeAPIResponseValidationError),
        (
            "garbage",
            TypeSafeAPIResponseValidationError,
        ),  # a non-JSON 200 fails validation at field_path ""
    ],
)
def test_each_failure_maps_to_its_sdk_error_on_one_attempt(
    recording: Path, failure: str, error_type: type
) -> None:
    with (
        LoopbackSystemOne(recording, failure=failure) as server,
        client(server.base_url, retry=NO_RETRY) as sdk,
        pytest.raises(error_type) as caught,
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert type(caught.value) is error_type
    assert len(server.requests) == 1
    if failure == "malformed":
        assert caught.value.field_path == "answers.broken.probabilities"
    if failure == "garbage":
        assert caught.value.field_path == ""


@pytest.mark.parametrize(
    "failure", ["bad_request", "unprocessable", "unauthorized", "rate_limit", "server_error"]
)
def test_echo_mode_repeats_the_request_headers_in_error_answers(
    recording: Path, failure: str
) -> None:
    with (
        LoopbackSystemOne(recording, failure=failure, echo_headers=True) as server,
        client(server.base_url, retry=NO_RETRY) as sdk,
        pytest.raises(TypeSafeAPIError) as caught,
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert f"Bearer {KEY}" in json.dumps(caught.value.body)
    if failure in ("bad_request", "unprocessable"):
        assert f"Bearer {KEY}" in str(caught.value)  # in the message, as a proxy would put it


def test_without_echo_mode_no_answer_repeats_the_key(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="bad_request") as server,
        client(server.base_url, retry=NO_RETRY) as sdk,
        pytest.raises(TypeSafeAPIError) as caught,
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert KEY not in json.dumps(caught.value.body) + str(caught.value)


def test_unauthorized_is_not_retried_by_the_default_policy(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="unauthorized") as server,
        client(server.base_url) as sdk,
        pytest.raises(TypeSafeAuthenticationError),
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert len(server.requests) == 1


def test_rate_limit_is_retried_after_retry_after_ms_then_gives_up(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="rate_limit", retry_after_ms=50) as server,
        client(server.base_url) as sdk,
    ):
        started = time.monotonic()
        with pytest.raises(TypeSafeRateLimitError) as caught:
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        elapsed = time.monotonic() - started
    assert caught.value.retry_after_ms == 50
    assert len(server.requests) == 3  # the default policy: 1 attempt + 2 retries
    assert server.requests[1]["headers"]["x-typesafe-retry-count"] == "1"
    assert 0.1 <= elapsed < 1.0


def test_default_policy_recovers_after_one_rate_limit(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="rate_limit", failure_count=1) as server,
        client(server.base_url) as sdk,
    ):
        answer = sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert answer.nouls["refund"].noul == 0.93
    assert [seen["status"] for seen in server.requests] == [429, 200]


def test_hang_times_out_the_client(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="hang") as server,
        client(server.base_url, retry=NO_RETRY, timeout=0.5) as sdk,
    ):
        started = time.monotonic()
        with pytest.raises(TypeSafeAPITimeoutError):
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        assert time.monotonic() - started < 2.0
    assert len(server.requests) == 1


def test_closed_port_is_a_connection_error() -> None:
    with (
        closed_port() as url,
        client(url, retry=NO_RETRY) as sdk,
        pytest.raises(TypeSafeAPIConnectionError) as caught,
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert not isinstance(caught.value, TypeSafeAPITimeoutError)


def test_model_override_shows_in_the_response(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, model_override="jev-1.15.0") as server,
        client(server.base_url) as sdk,
    ):
        answer = sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert answer.model == "jev-1.15.0"
    assert answer.nouls["refund"].noul == 0.93


def test_models_list_names_the_recorded_models(recording: Path) -> None:
    with LoopbackSystemOne(recording) as server, client(server.base_url) as sdk:
        listed = sdk.models.list()
    assert [model.name for model in listed.models] == [RECORDED_MODEL]
    assert server.requests[0]["path"] == "/v1/models"


def test_max_requests_answers_503_then_stops_serving(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, max_requests=2) as server,
        client(server.base_url, retry=NO_RETRY) as sdk,
    ):
        for _ in range(2):
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        with pytest.raises(TypeSafeInternalServerError) as caught:
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        assert caught.value.status == 503
        with pytest.raises(TypeSafeAPIConnectionError):
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
    assert len(server.requests) == 3


def test_max_seconds_stops_the_server(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, max_seconds=2.0) as server,
        client(server.base_url, retry=NO_RETRY) as sdk,
    ):
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        server.wait()  # returns when the time limit has stopped the server
        with pytest.raises(TypeSafeAPIConnectionError):
            sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)


def test_latency_delays_each_answer(recording: Path) -> None:
    with LoopbackSystemOne(recording, latency=0.2) as server, client(server.base_url) as sdk:
        started = time.monotonic()
        sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL)
        assert 0.2 <= time.monotonic() - started < 1.0


def test_trickle_sends_the_head_at_once_and_the_body_a_byte_at_a_time(recording: Path) -> None:
    with (
        LoopbackSystemOne(recording, failure="trickle", trickle_seconds=0.2) as server,
        httpx2.Client(timeout=5) as http,
    ):
        body = json.dumps({"model": MODEL, "state": NOUL_STATE, "questions": NOUL_QUESTIONS})
        started = time.monotonic()
        with http.stream("POST", f"{server.base_url}/v1/systemone", content=body,
                         headers={"Authorization": f"Bearer {KEY}"}) as response:
            head = time.monotonic() - started
            arrivals = []
            for chunk in response.iter_raw():
                arrivals.append((chunk, time.monotonic() - started))
                if len(arrivals) == 3:
                    break
    assert response.status_code == 200 and head < 0.15
    assert [len(chunk) for chunk, _ in arrivals] == [1, 1, 1]
    assert arrivals[2][1] - arrivals[0][1] >= 2 * 0.2 * 0.8


def test_unknown_failure_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="failure must be one of"):
        LoopbackSystemOne({}, failure="flaky")


@pytest.mark.skipif(
    loopback_replies.zstd is not None, reason="zstd is importable: bodies are decompressed"
)
def test_compressed_body_without_zstd_is_a_clear_415() -> None:
    with LoopbackSystemOne({}) as server:
        reply = httpx2.post(
            f"{server.base_url}/v1/systemone",
            content=b"\x28\xb5\x2f\xfd",
            headers={"Authorization": f"Bearer {KEY}", "Content-Encoding": "zstd"},
        )
    assert reply.status_code == 415
    assert "compression=False" in reply.json()["error"]["message"]


@pytest.mark.skipif(
    loopback_replies.zstd is None,
    reason="backports.zstd, typesafe-sdk's optional [zstd] extra, is not in the lock: no zstd "
           "body can be made or read here",
)
def test_zstd_compressed_request_is_replayed() -> None:
    state = {"text": "long " * 400}  # over the SDK's 1024-byte compression threshold
    recorded = {recording_key(MODEL, state, NOUL_QUESTIONS): NOUL_RESPONSE}
    with LoopbackSystemOne(recorded) as server, client(server.base_url, compression="zstd") as sdk:
        answer = sdk.system_one(state, NOUL_QUESTIONS, model=MODEL)
    assert answer.nouls["refund"].noul == 0.93
    assert server.requests[0]["headers"]["content-encoding"] == "zstd"


def test_command_line_serves_until_ctrl_c(recording: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "tools.loopback_server",
        "--recording",
        str(recording),
        "--max-seconds",
        "20",
    ]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            base_url = process.stdout.readline().strip()
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base_url)
            with client(base_url, retry=NO_RETRY) as sdk:
                assert (
                    sdk.system_one(NOUL_STATE, NOUL_QUESTIONS, model=MODEL).model == RECORDED_MODEL
                )
            process.send_signal(signal.SIGINT)
            _, log = process.communicate(timeout=60)  # generous: shared machines are slow
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0
    assert "POST /v1/systemone" in log
