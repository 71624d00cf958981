"""No secret leaves the process: the API key and Authorization values are redacted everywhere.

The loopback server's echo mode repeats the request's headers (the key included) in its error
answers, as a misconfigured proxy does; every message and file the project then writes is
searched for the key.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from typesafe_sdk import TypeSafeAPIConnectionError

from memorybook.api_errors import describe_api_failure
from memorybook.config import RECORDING_PATH
from memorybook.recording import RecordingError
from memorybook.redaction import redact
from tests import helpers
from tests.helpers import RECORD, REPO_ROOT, record_arguments
from tools.loopback_server import LoopbackSystemOne

CANARY_KEY = "canary-sk-0b9e7d3f61a24c58"


def live_env(base_url: str, recording: Path) -> dict[str, str]:
    return helpers.live_env(base_url, recording.parent, CANARY_KEY, recording,
                            MEMORYBOOK_TIMEOUT_SECONDS="5")


@pytest.mark.parametrize("text, kept", [
    (f"key {CANARY_KEY} here", "key [redacted] here"),
    (f'{{"authorization": "Bearer {CANARY_KEY}"}}', '{"authorization": "[redacted]"}'),
    ("{'Authorization': 'Basic dXNlcjpwYXNz'}", "{'Authorization': '[redacted]'}"),
    ("Authorization: Bearer other-token\r\nHost: x", "Authorization: [redacted]\r\nHost: x"),
    ('{\\"authorization\\": \\"Bearer x1\\"}', '{\\"authorization\\": \\"[redacted]\\"}'),
    ("sent bearer abc.def.ghi to it", "sent bearer [redacted] to it"),
    ("nothing secret: make record", "nothing secret: make record"),
])
def test_redact_replaces_the_key_and_every_authorization_value(monkeypatch, text, kept):
    monkeypatch.setenv("TYPESAFE_API_KEY", CANARY_KEY)
    assert redact(text) == kept


def test_redacting_twice_changes_nothing_more(monkeypatch):
    monkeypatch.setenv("TYPESAFE_API_KEY", CANARY_KEY)
    once = redact(f"{{'authorization': 'Bearer {CANARY_KEY}', 'x': 1}} Authorization: Bearer z")
    assert once == "{'authorization': '[redacted]', 'x': 1} Authorization: [redacted]"
    assert redact(once) == once


def test_a_short_key_is_redacted_as_a_word_only(monkeypatch):
    monkeypatch.setenv("TYPESAFE_API_KEY", "k")
    assert redact("key k, make record") == "key [redacted], make record"


def test_errors_the_project_raises_are_redacted(monkeypatch):
    monkeypatch.setenv("TYPESAFE_API_KEY", CANARY_KEY)
    assert CANARY_KEY not in str(RecordingError(f"the recording mentions {CANARY_KEY}"))


def test_make_record_never_reports_or_writes_the_key(tmp_path):
    command = [*RECORD, *record_arguments(tmp_path / "new.json", tmp_path / "notebooks",
                                          "--calls-only")]
    with LoopbackSystemOne(RECORDING_PATH, failure="bad_request", echo_headers=True) as server:
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=300, env=live_env(server.base_url, tmp_path / "new.json"))
    assert result.returncode == 1
    assert "Live call failed: the API refused the request (HTTP 400)" in result.stderr
    assert "'authorization': '[redacted]'" in result.stderr
    assert CANARY_KEY not in result.stdout + result.stderr
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or CANARY_KEY.encode() not in path.read_bytes(), path


def test_a_notebook_saved_after_an_echoing_failure_holds_no_key(tmp_path):
    # Notebook 2 calls through notebook 1's module, whose client is the collection's.
    notebook = REPO_ROOT / "notebooks" / "02_memory_gate.ipynb"
    saved = tmp_path / "executed.ipynb"
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--execute", "--allow-errors",
               "--to", "notebook", "--output", str(saved), str(notebook)]
    with LoopbackSystemOne({}, failure="bad_request", echo_headers=True) as server:
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=300, env=live_env(server.base_url, tmp_path / "new.json"))
        sent = len(server.requests)
    assert result.returncode == 0, result.stderr
    assert sent > 0, "the notebook made no live call"
    text = saved.read_text(encoding="utf-8")
    assert "Live call failed: the API refused the request (HTTP 400)" in text
    assert "[redacted]" in text
    assert CANARY_KEY not in text and CANARY_KEY not in result.stdout + result.stderr


KEY_WITH_SLASHES = "sk-live/Qm+9xYz0123/456789ab"


def base64_runs_decode_to(text: str, secret: str) -> bool:
    """Whether any run of base64 in `text`, read at any alignment, decodes to bytes holding it."""
    for run in re.findall(r"[A-Za-z0-9+/_=-]{8,}", text):
        for alphabet in (run, run.replace("-", "+").replace("_", "/")):
            for start in range(4):
                chunk = alphabet[start:].rstrip("=")
                chunk = chunk[: len(chunk) // 4 * 4]
                with contextlib.suppress(ValueError):
                    if secret.encode() in base64.b64decode(chunk, validate=True):
                        return True
    return False


@pytest.mark.parametrize("echo", [
    pytest.param(lambda key: urllib.parse.quote(key, safe=""), id="URL-encoded"),
    pytest.param(lambda key: urllib.parse.quote(key, safe="").replace("%2F", "%2f")
                 .replace("%2B", "%2b"), id="URL-encoded, lowercase hex"),
    pytest.param(lambda key: urllib.parse.quote_plus(key), id="form-encoded"),
    pytest.param(lambda key: json.dumps({"key": key}).replace("/", "\\/"), id="slashes escaped"),
    *(pytest.param(lambda key, prefix=prefix: base64.b64encode(f"{prefix}{key}!".encode()).decode(),
                   id=f"base64 at offset {len(prefix)}") for prefix in ("", "a", "ab", "abc")),
    pytest.param(lambda key: base64.urlsafe_b64encode(key.encode()).decode(), id="URL-safe base64"),
])
def test_redact_finds_the_key_however_an_endpoint_echoes_it(monkeypatch, echo):
    monkeypatch.setenv("TYPESAFE_API_KEY", KEY_WITH_SLASHES)
    echoed = echo(KEY_WITH_SLASHES)
    shown = redact(f"the endpoint said: {echoed} (end)")
    assert "[redacted]" in shown
    assert echoed not in shown
    assert not base64_runs_decode_to(shown, KEY_WITH_SLASHES)
    assert urllib.parse.unquote_plus(shown.replace("\\/", "/")).count(KEY_WITH_SLASHES) == 0


@pytest.mark.parametrize("endpoint", [
    "https://user:hunter2-endpoint@api.example.test/v1",
    "http://admin:p%40ss-hunter2@127.0.0.1:8080",
    "http://127.0.0.1:8080/?password=hunter2-query",
    "https://api.example.test/v1?user=me&api_key=hunter2-key#top",
])
def test_an_endpoints_password_never_shows_in_a_message(monkeypatch, endpoint):
    monkeypatch.setenv("TYPESAFE_ENDPOINT", endpoint)
    message = describe_api_failure(TypeSafeAPIConnectionError("Connection error: refused"))
    assert "hunter2" not in message
    assert "could not connect to" in message


@pytest.mark.parametrize("text", [
    "GET https://host/v1?password=hunter2-a&x=1",
    "postgresql://u@db/memories?sslpassword=hunter2-b",
    "see http://host/?token=hunter2-c",
])
def test_a_credential_in_a_urls_query_never_shows(text):
    shown = redact(text)
    assert "hunter2" not in shown and "[redacted]" in shown


@pytest.mark.parametrize("text", [
    "DATABASE_URL=${DATABASE_URL:-postgres://app:hunter2-e@db:5432/app}",
    "see .redis://u:hunter2-f@h", "--redis://u:hunter2-g@h", "jdbc:postgresql://u:hunter2-h@h",
    "git+ssh://u:hunter2-i@h", "(POSTGRESQL://U:hunter2-j@H)", "foo_redis://u:hunter2-k@h",
])
def test_a_urls_password_never_shows_whatever_precedes_its_scheme(text):
    shown = redact(text)
    assert "hunter2" not in shown and "[redacted]@" in shown, (
        f"_URL_PASSWORD in memorybook/redaction.py must find the URL wherever it starts: {shown}")


@pytest.mark.parametrize("run", ["a-", "a.1+"])
def test_redacting_a_long_run_of_scheme_characters_takes_no_time_and_changes_nothing(run):
    # A ticket's subject goes into a miss's message, which is redacted: in the service, in the
    # event loop. Each pattern must read a run once, not once from each of its characters
    # (the URL password's pattern took 3 to 7 s on 40,000 characters, and 39 s on 100,000).
    import time

    text = run * (40_000 // len(run)) + " postgresql://u:hunter2-d@db"
    started = time.perf_counter()
    redacted = redact(text)
    took = time.perf_counter() - started
    assert redacted == text.replace("hunter2-d", "[redacted]"), redacted[-60:]
    assert took < 0.5 + helpers.MARGIN_SECONDS, (
        f"redact() took {took:.2f} s on {len(text):,} characters, about 2 ms of work: a pattern "
        "in memorybook/redaction.py reads a run of characters again from each of them (anchor "
        "its start so that it cannot begin inside a run)")
