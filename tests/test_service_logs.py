"""The service's logs (memorybook/service/logs.py): with MEMORYBOOK_LOG_FORMAT=json every line
uvicorn and the service write is one JSON object with time, level and event; each request has
an id (its sane X-Request-ID, else one made), sent back and carried by its lines, its gate's
after the reply included; and no line holds a ticket's words, the key or the token."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import pytest

from memorybook.service.logs import JsonLines
from tests.helpers import (
    REPO_ROOT,
    SERVICE_KEY,
    MadeUpAnswers,
    free_port,
    loopback_http,
    new_key,
    services,
    talk,
)
from tests.test_service_http import service as service_in_process
from tests.test_service_http import ticket
from tools.loopback_replies import error_reply
from tools.loopback_server import LoopbackSystemOne

TOKEN = "logs-canary-token-51c0e7a9"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}
WORDS = "Kestrel invoice 7731"  # a ticket's words, which no line may hold


class GatesRefused(LoopbackSystemOne):
    """Made-up answers (never Jev's), but for every gate and for ticket T-502's routing: a 400
    that quotes the ticket and the request's headers, the key's among them, as a careless API
    might."""

    def __init__(self) -> None:
        super().__init__({}, answer_with=MadeUpAnswers(hang=False))

    def _answer(self, number, method, path, headers, body, problem):
        state = body.get("state", {}) if isinstance(body, dict) else {}
        if isinstance(body, dict) and ("remember" in body.get("questions", {})
                                       or state.get("ticket", {}).get("id") == "T-502"):
            return error_reply(400, "bad_request", f"refused {json.dumps(state)}; request "
                                                   f"headers: {headers}")
        return super()._answer(number, method, path, headers, body, problem)


def said(line: str) -> dict:
    try:
        said = json.loads(line)
    except ValueError:
        said = None
    assert isinstance(said, dict) and {"time", "level", "event"} <= set(said), (
        "with MEMORYBOOK_LOG_FORMAT=json every line the service writes must be one JSON object "
        "with time, level and event (log_as_settings_say() and JsonLines in "
        f"memorybook/service/logs.py); this one is not: {line!r}")
    return said


def test_json_logs_are_one_object_a_line_with_request_ids_and_no_words_or_secrets(tmp_path):
    store_key = new_key()
    env = {"MEMORYBOOK_LOG_FORMAT": "json", "MEMORYBOOK_SERVICE_TOKEN": TOKEN,
           "MEMORYBOOK_STORE_KEY": store_key, "UVICORN_LOG_LEVEL": "debug"}
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    routed = ticket("C-1042", "T-1")
    routed["ticket"]["subject"] = WORDS
    failing = ticket("C-2210", "T-502")
    failing["ticket"]["messages"][0]["text"] = WORDS
    with GatesRefused() as api, services(1, url, api.base_url, tmp_path, probe="/health",
                                         **env) as [(process, base)]:
        http = loopback_http()
        answers = {
            "routed": http.post(f"{base}/tickets", json=routed, timeout=30,
                                headers={**AUTHORIZED, "X-Request-ID": "flow-routed-1"}),
            "jev failed": http.post(f"{base}/tickets", json=failing, headers=AUTHORIZED,
                                    timeout=30),
            "a miss": http.get(f"{base}/customers/C-1042/memories/T-404", timeout=30,
                               headers={**AUTHORIZED, "X-Request-ID": "x" * 129}),
            "refused": http.post(f"{base}/tickets", headers={
                **AUTHORIZED, "Content-Type": "application/json", "X-Request-ID": "a b"},
                content=b'{"customer": {"id": "C-1"}, "customer": {"id": "C-2"}}', timeout=30),
            "no token": http.get(f"{base}/customers/C-1042/memories", timeout=30),
        }
        process.send_signal(signal.SIGTERM)  # the gates drain, the lines of shutdown follow
        process.wait(60)
    assert [answer.status_code for answer in answers.values()] == [200, 502, 404, 422, 401], {
        what: (answer.status_code, answer.text[:200]) for what, answer in answers.items()}
    ids = {what: answer.headers.get("x-request-id") for what, answer in answers.items()}
    assert ids["routed"] == "flow-routed-1" and all(
        ids[what] and len(ids[what]) <= 128 and ids[what] != "a b" for what in ids), (
        "each answer must send back its request's id in X-Request-ID: the client's when sane, "
        f"else one made (RequestIds in memorybook/service/logs.py): {ids}")
    [log] = tmp_path.glob("service-*.log")
    text = log.read_text()
    lines = [said(line) for line in text.splitlines()]
    for secret, what in ((SERVICE_KEY, "the API key"), (store_key, "the store key"),
                         (TOKEN, "the token"), ("Kestrel", "a ticket's words"),
                         ("7731", "a ticket's words")):
        assert secret not in text, f"the service's JSON log holds {what}: {text}"
    for what, answer in answers.items():
        access = [line.get("status") for line in lines if line["logger"] == "uvicorn.access"
                  and line.get("request_id") == ids[what]]
        assert access == [answer.status_code], (
            f"the access line of the request answered {answer.status_code} ({what}) must carry "
            f"its request id {ids[what]!r} (RequestIds in memorybook/service/logs.py): "
            f"{[line for line in lines if line['logger'] == 'uvicorn.access']}")
    gate = [line for line in lines if "gate for customer 'C-1042'" in line["event"]]
    jev = [line for line in lines if "routing ticket 'T-502'" in line["event"]]
    assert [(line["level"], line.get("request_id")) for line in gate] == [
        ("ERROR", "flow-routed-1")] and [line.get("request_id") for line in jev] == [
        ids["jev failed"]], (
        "the failed gate's line, written after its reply, and the failed routing's must each "
        f"carry the id of the request they ran for: gate {gate}, routing {jev}")
    events = [line["event"] for line in lines]
    assert events[0].startswith("Started server process") and "Application shutdown " \
        "complete." in events, f"the start and the shutdown must be logged too: {events}"


def test_every_answer_sends_back_the_request_id_the_guard_s_refusals_too(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", TOKEN)
    app, _ = service_in_process(tmp_path)
    sane = ["r-1", "3f9a1c7e-55d2-4b8e-9c1a-0d2e3f4a5b6c", "Root=1-6789+abc@edge:7", "z" * 128]
    insane = ["", "a b", "z" * 129, "é", "r\t1", "r/1", "<script>"]

    async def requests(http):
        answers = []
        for given in sane + insane:
            headers = {**AUTHORIZED, "X-Request-ID": given.encode()}
            answers.append(await http.get("/customers/C-1/memories", headers=headers))
        answers.append(await http.get("/customers/C-1/memories"))  # 401 from the guard
        answers.append(await http.post("/tickets", json=ticket(), headers={
            **AUTHORIZED, "Host": "evil.example"}))  # 400 from the guard
        answers.append(await http.post("/tickets", content=b"[", headers={
            **AUTHORIZED, "Content-Type": "application/json"}))  # 422
        return answers

    answers = talk(app, requests)
    sent = [answer.headers.get("x-request-id") for answer in answers]
    assert sent[:len(sane)] == sane, (
        f"a sane X-Request-ID (1-128 of A-Za-z0-9._:@=+-) must come back as it was: {sent}")
    made = sent[len(sane):]
    assert all(made) and len(set(made)) == len(made) and not set(made) & set(insane), (
        "an X-Request-ID that is not sane, or none, must get an id made for the request, a new "
        f"one each, and the guard's refusals too (RequestIds outside Guard): {made}")
    assert [answer.status_code for answer in answers[-3:]] == [401, 400, 422]


def test_a_json_line_is_one_line_of_ascii_with_the_traceback_inside():
    try:
        raise RuntimeError("first line\nsecond line \u2028 third")
    except RuntimeError:
        record = logging.LogRecord("memorybook", logging.ERROR, __file__, 1, "failed: %s",
                                   ("x\ny",), exc_info=sys.exc_info())
    record.color_message = "not a field"  # what uvicorn adds, and a library might: never written
    line = JsonLines().format(record)
    assert line.isascii() and len(line.splitlines()) == 1, (
        "a JSON log line must be one line of ASCII, its traceback inside (JsonLines in "
        f"memorybook/service/logs.py): {line!r}")
    fields = json.loads(line)
    assert fields["event"] == "failed: x\ny" and "second line" in fields["exception"] and (
        "color_message" not in fields and fields["level"] == "ERROR"), fields



@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_start_refused_by_a_setting_is_one_line_under_uvicorn(tmp_path, log_format):
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MEMORYBOOK_", "TYPESAFE_"))}
    env.update(MEMORYBOOK_LOG_FORMAT=log_format, MEMORYBOOK_SERVICE_TOKEN=" \t",
               MEMORYBOOK_STORE_URL=f"sqlite:///{tmp_path / 'store.sqlite3'}")
    refused = subprocess.run(
        [sys.executable, "-m", "uvicorn", "--factory", "memorybook.service:create_app",
         "--host", "127.0.0.1", "--port", str(free_port())],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    lines = (refused.stdout + refused.stderr).splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and (
        "MEMORYBOOK_SERVICE_TOKEN is set but blank" in lines[0]), (
        "a start refused by a setting must say why in one line, not a traceback "
        "(refused_in_one_line() in memorybook/service/logs.py, around create_app()'s reading "
        f"of its settings): exit {refused.returncode}, {lines}")
    if log_format == "json":
        assert said(lines[0])["level"] == "ERROR", lines[0]


def test_make_serves_check_says_its_lines_as_json_when_asked(monkeypatch, capsys, tmp_path):
    from memorybook.service_settings import main

    for name in [name for name in os.environ if name.startswith(("MEMORYBOOK_", "TYPESAFE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEMORYBOOK_LOG_FORMAT", "json")
    monkeypatch.setenv("MEMORYBOOK_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite3'}")
    started = main(["127.0.0.1"]), capsys.readouterr().err  # a new store: its key file, said
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", "")
    refused = main(["127.0.0.1"]), capsys.readouterr().err
    for (_, printed), wanted in ((started, "Created a new encryption key"),
                                 (refused, "MEMORYBOOK_SERVICE_TOKEN is set but blank")):
        lines = printed.splitlines()
        assert len(lines) == 1 and wanted in said(lines[0])["event"], (
            "make serve's check (memorybook/service_settings.py) must print its lines as the "
            f"service logs them, one JSON object each with MEMORYBOOK_LOG_FORMAT=json: {lines}")
    assert (started[0], refused[0]) == (0, 2)
