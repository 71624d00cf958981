"""The service as a client meets it: uvicorn in a subprocess on a loopback port, with a token, on
a made-up Jev (tests/fuzzed_service.py). Schemathesis fuzzes its OpenAPI schema with every check
and finds nothing; every customer id that POST accepts is reachable by GET and DELETE, and every
other one is refused naming the rule; a 60 MB body is refused before it is read; a foreign Host,
a missing token and a `text/plain` POST are refused. The same contract in process, each promise
on its own: tests/test_service_http.py."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest

from memorybook.service_models import CUSTOMER_ID_PATTERN, follows_the_id_rule
from tests.helpers import REPO_ROOT

TOKEN = "contract-canary-token-0b5e2f91"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}
RULE = "1 to 128 characters of ASCII letters, digits and . _ : @ -"
MB = 1_000_000


@dataclass
class Live:
    url: str
    port: int
    process: subprocess.Popen
    log: Path
    # One client for the module's requests: each still opens a connection of its own (no
    # keep-alive), as httpx2.get() does, without making a client (and its TLS context, 20 ms of
    # CPU) per request.
    http: httpx2.Client


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The service on a loopback port for this module's tests; stopped (SIGTERM) after them."""
    folder = tmp_path_factory.mktemp("live_service")
    port = free_port()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MEMORYBOOK_", "TYPESAFE_"))}
    env.update(MEMORYBOOK_STORE_URL=f"sqlite:///{folder / 'store.sqlite3'}",
               MEMORYBOOK_SERVICE_TOKEN=TOKEN, PYTHONPATH=str(REPO_ROOT))
    log = folder / "service.log"
    with open(log, "wb") as written:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "tests.fuzzed_service:create_app",
             "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
            cwd=folder, env=env, stdout=written, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        with httpx2.Client(limits=httpx2.Limits(max_keepalive_connections=0)) as http:
            while True:
                assert process.poll() is None, log.read_text()
                try:
                    if http.get(f"{url}/customers/C-0/memories", headers=AUTHORIZED,
                                timeout=1).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert time.monotonic() < deadline, (
                    f"the service did not answer: {log.read_text()}")
                time.sleep(0.1)
            yield Live(url, port, process, log, http)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert TOKEN not in log.read_text(errors="replace"), "the service logged its token"


def state(customer: object, ticket_id: str = "T-1") -> dict:
    return {"customer": {"id": customer}, "ticket": {
        "id": ticket_id, "received_on": "2026-10-02", "subject": "Question",
        "messages": [{"from": "customer", "text": "We self-host on Linux."}]}}


def test_schemathesis_with_every_check_finds_nothing(live, tmp_path):
    schemathesis = shutil.which("st", path=str(Path(sys.executable).parent))
    started = time.monotonic()
    # A few hundred requests, the same ones each run (--seed); stateful links included.
    run = subprocess.run(
        [schemathesis, "run", f"{live.url}/openapi.json", "--checks", "all",
         "--header", f"Authorization: Bearer {TOKEN}", "--max-examples", "75", "--seed", "1",
         "--workers", "1", "--request-timeout", "10", "--no-color"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    summary = [line for line in run.stdout.splitlines() if "generated" in line]
    print(f"schemathesis: {' '.join(summary).strip()} in {seconds:.1f} s")
    assert run.returncode == 0 and "No issues found" in run.stdout, (
        "Schemathesis found the service answering other than its OpenAPI schema says (the "
        "models and statuses in memorybook/service_models.py, the routes in "
        f"memorybook/service/routes.py):\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}")
    assert TOKEN not in run.stdout.replace(f"Bearer {TOKEN}", ""), "an answer held the token"


ACCEPTED = ["C-1042", "a", "0", "user@example.com", "acme:C-7", "x.y_z-1", "A" * 128, "a..",
            "C.", "9:@-._", "C-1042.."]
REFUSED = ["/", "a/b", "%2F", "C%2F1", "a%2Fb", " ", "", ".", "..", "a b", "é", "-x", "A" * 129,
           "C-1?x", "C#1", "a\\b", "C-1;x", "\ud800", "\t", "C\n"]
tickets = itertools.count(1)


def reaches(live: Live, customer: str) -> str | None:
    """POST a ticket for `customer`; if it is accepted, check GET, history and DELETE reach its
    memory (with the id %-encoded whole, and as most clients write it) and return None; if it
    is refused, return the 422's detail."""
    ticket_id = f"T-{next(tickets)}"
    posted = live.http.post(  # json.dumps: a lone surrogate as its \\u escape
        f"{live.url}/tickets", headers={**AUTHORIZED, "Content-Type": "application/json"},
        content=json.dumps(state(customer, ticket_id)), timeout=30)
    if posted.status_code == 422:
        return posted.json()["detail"]
    assert posted.status_code == 200, f"POST for customer {customer!r}: {posted.text}"
    for path in (quote(customer, safe=""), quote(customer)):
        base = f"{live.url}/customers/{path}"
        listed = live.http.get(f"{base}/memories", headers=AUTHORIZED, timeout=30)
        history = live.http.get(f"{base}/history", headers=AUTHORIZED, timeout=30)
        assert listed.status_code == 200 and ticket_id in [
            m["request"]["ticket"]["id"] for m in listed.json()["memories"]], (
            f"POST accepted customer {customer!r}, and GET {base}/memories does not reach its "
            f"memory: {listed.status_code} {listed.text[:300]}")
        assert ("saved", ticket_id) in [(e["event"], e["ticket_id"])
                                        for e in history.json()["events"]], history.text[:300]
    erased = live.http.delete(f"{live.url}/customers/{quote(customer, safe='')}/memories",
                           headers=AUTHORIZED, timeout=30)
    assert erased.status_code == 200 and erased.json()["erased"] >= 1, erased.text
    return None


@pytest.mark.parametrize("customer", ACCEPTED)
def test_every_id_post_accepts_is_reachable_by_get_and_delete(live, customer):
    assert reaches(live, customer) is None


@pytest.mark.parametrize("customer", REFUSED, ids=repr)
def test_post_refuses_every_id_get_and_delete_could_not_reach_naming_the_rule(live, customer):
    refused = reaches(live, customer)
    assert refused is not None and RULE in refused, (
        f"customer id {customer!r}: POST must refuse it with 422 naming the rule "
        f"(CUSTOMER_ID_RULE, memorybook/service_models.py), not {refused!r}")


def test_any_id_is_either_reachable_or_refused_naming_the_rule(live, tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(tmp_path)  # its caches there, not in the working directory

    ids = st.one_of(st.from_regex(CUSTOMER_ID_PATTERN.strip("^$"), fullmatch=True),
                    st.text(st.characters(exclude_categories=()), max_size=12))

    @settings(max_examples=80, deadline=None, database=None, derandomize=True)
    @given(ids)
    def either_reachable_or_refused(customer: str) -> None:
        refused = reaches(live, customer)
        assert (refused is None) == follows_the_id_rule(customer), (customer, refused)
        assert refused is None or RULE in refused, refused

    either_reachable_or_refused()


def peak_resident_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        pytest.skip("the peak resident memory is read from /proc (Linux)")
    kb = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return int(kb.split()[1]) / 1000


def sixty_mb_body(live: Live, chunked: bool) -> bytes:
    """Send POST /tickets a 60 MB body (declared, or chunked with no length) in 1 MB pieces
    from a thread, while reading the answer; return what came back before the connection
    closed. The sending stops where the service stops reading."""
    head = (f"POST /tickets HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n")
    head += ("Transfer-Encoding: chunked\r\n\r\n" if chunked
             else f"Content-Length: {60 * MB}\r\n\r\n")
    piece = b"[" + b" " * (MB - 1)
    connection = socket.create_connection(("127.0.0.1", live.port), timeout=30)

    def send() -> None:
        try:
            connection.sendall(head.encode())
            for _ in range(60):
                connection.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                connection.sendall(b"0\r\n\r\n")
        except OSError:  # the service closed the connection: it read no more
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            more = connection.recv(65536)
            if not more:
                break
            answer += more
    except OSError:
        pass
    finally:
        connection.close()
        sender.join(30)
    return answer


def test_a_60_mb_body_is_refused_with_413_and_never_read_whole(live):
    live.http.post(f"{live.url}/tickets", headers=AUTHORIZED, json=state("C-9"), timeout=30)
    before = peak_resident_mb(live.process.pid)
    answers = {how: sixty_mb_body(live, chunked=how == "chunked")
               for how in ("with a Content-Length", "chunked")}
    after = peak_resident_mb(live.process.pid)
    print(f"the service's peak resident memory: {before:.0f} MB before two 60 MB bodies, "
          f"{after:.0f} MB after")
    for how, answer in answers.items():
        assert answer.startswith(b"HTTP/1.1 413 "), (
            f"a 60 MB body {how}: the Guard (memorybook/service_guard.py) must answer 413: "
            f"{answer[:300]!r}")
    assert after - before < 20, (
        f"the service's peak resident memory grew by {after - before:.0f} MB for a 60 MB body: "
        "it must read no more than MEMORYBOOK_MAX_BODY_BYTES (Guard.limited())")
    still = live.http.get(f"{live.url}/customers/C-9/memories", headers=AUTHORIZED, timeout=30)
    assert still.status_code == 200


def test_a_foreign_host_no_token_or_a_text_plain_post_plants_nothing(live):
    body = json.dumps(state("C-77"))
    refused = [
        live.http.post(f"{live.url}/tickets", content=body, timeout=30,
                       headers={**AUTHORIZED, "Host": "evil.example",
                                "Content-Type": "application/json"}),
        live.http.post(f"{live.url}/tickets", content=body, timeout=30,
                       headers={"Content-Type": "application/json"}),
        live.http.post(f"{live.url}/tickets", content=body, timeout=30,
                       headers={**AUTHORIZED, "Content-Type": "text/plain;charset=UTF-8"}),
    ]
    assert [answer.status_code for answer in refused] == [400, 401, 415], [
        (answer.status_code, answer.text) for answer in refused]
    listed = live.http.get(f"{live.url}/customers/C-77/memories", headers=AUTHORIZED,
                           timeout=30)
    assert listed.json()["memories"] == [], "a refused POST planted a memory"
