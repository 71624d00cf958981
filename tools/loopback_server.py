"""A loopback stand-in for TypeSafe's System One API that replays a cooksafe recording.

The real ``typesafe_sdk.TypeSafeClient`` talks to it over HTTP on 127.0.0.1, so tests exercise the
SDK's own request encoding, response parsing, error mapping and retries. Nothing leaves the machine.

    with LoopbackSystemOne("json_cache/json_cache.json") as server:
        client = TypeSafeClient(api_key="test-key", base_url=server.base_url, compression=False)

A request whose recording key is missing answers 404 naming the key: a test stand-in must be loud.
With ``failure="trickle"`` the answer's status and headers come at once and its body one byte every
``trickle_seconds``, as from an endpoint that is stuck but never silent.
With ``echo_headers=True`` every error answer (4xx and 5xx) repeats the request's headers, the
``Authorization`` header included, in its message and details, as a misconfigured proxy does:
the tests use it to check that no key reaches a message.
Run ``python -m tools.loopback_server --recording FILE`` to serve a recording by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

from memorybook.recording import cache_key
from tools.loopback_replies import (
    FAILURES,
    Reply,
    Trickled,
    error_reply,
    failure_reply,
    json_reply,
    read_body,
    with_headers_echoed,
)

logger = logging.getLogger(__name__)

HANG_SECONDS = 5.0  # a "hang" holds the request at least this long (or until the server stops)


def recording_key(model: str, state: object, questions: object) -> str:
    """The recording's key for a request, as the notebooks' ``_system_one`` files it."""
    return cache_key(model, json.dumps(state), json.dumps(questions))


@contextlib.contextmanager
def closed_port() -> Iterator[str]:
    """An ``http://127.0.0.1:PORT`` URL that refuses every connection while the block runs.

    The port stays bound but never listens, so no other process can start listening on it
    meanwhile (a port that was merely free a moment ago could be taken by then).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


class LoopbackSystemOne:
    """Serve a recording on 127.0.0.1 from a background thread while the ``with`` block runs."""

    def __init__(
        self,
        recording: dict | str | Path,
        *,
        latency: float = 0.0,
        failure: str | None = None,
        failure_count: int | None = None,
        retry_after_ms: int = 300,
        model_override: str | None = None,
        max_requests: int = 1000,
        max_seconds: float = 600.0,
        answer_with: Callable[[dict], dict] | None = None,
        echo_headers: bool = False,
        trickle_seconds: float = 1.0,
    ) -> None:
        if failure is not None and failure not in FAILURES:
            raise ValueError(f"failure must be one of {FAILURES}, not {failure!r}")
        self.recording = (
            recording if isinstance(recording, dict) else json.loads(Path(recording).read_text())
        )
        self.latency, self.failure, self.failure_count = latency, failure, failure_count
        self.retry_after_ms, self.model_override = retry_after_ms, model_override
        self.max_requests, self.max_seconds = max_requests, max_seconds
        # Instead of the recording: a function from a request body to the whole response. Tests use
        # it for answers that are synthetic by construction and never Jev's.
        self.answer_with = answer_with
        self.echo_headers = echo_headers
        self.trickle_seconds = trickle_seconds
        self.base_url = ""
        self.requests: list[dict] = []
        self._hits = self._misses = 0
        self._lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0  # requests being answered now, and at most
        self.stopped = threading.Event()  # also wakes sleeping and hanging handlers
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    def hits(self) -> int:
        return self._hits

    def misses(self) -> int:
        return self._misses

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True  # never join handler threads on close
        self._server.owner = self  # type: ignore[attr-defined]
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        threading.Thread(target=serve, name="loopback-system-one", daemon=True).start()
        self._timer = threading.Timer(self.max_seconds, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop accepting connections and release held requests; safe to call more than once."""
        with self._lock:
            if self.stopped.is_set() or self._server is None:
                return
            self.stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        self._server.shutdown()  # called from a handler or timer thread, never the serving thread
        self._server.server_close()

    def wait(self) -> None:
        """Block until the server stops (limits reached); Ctrl-C still interrupts."""
        while not self.stopped.wait(0.5):
            pass

    # Answers are (status, headers, body bytes), or None to drop the connection unanswered.

    def answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        body, problem = read_body(headers, raw)
        seen = {"method": method, "path": path, "headers": headers, "body": body, "status": None}
        with self._lock:
            self.requests.append(seen)
            number = len(self.requests)
        if number > self.max_requests:
            self.stop()  # before answering, so the client's next call is refused
            reply = error_reply(503, "limit", f"loopback served max_requests={self.max_requests}")
        else:
            with self._lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                reply = self._answer(number, method, path, headers, body, problem)
            finally:
                with self._lock:
                    self.in_flight -= 1
        if reply is None:
            return None
        if self.echo_headers and reply[0] >= 400:
            reply = with_headers_echoed(reply, headers)
        seen["status"] = reply[0]
        return reply[0], {**reply[1], "x-typesafe-request-id": f"loopback-{number}"}, reply[2]

    def _answer(self, number, method, path, headers, body, problem) -> Reply | None:
        failing = self.failure is not None and (
            self.failure_count is None or number <= self.failure_count
        )
        if failing and self.failure == "hang":
            self.stopped.wait(max(HANG_SECONDS, self.latency))
            return None
        self.stopped.wait(self.latency)
        if problem is not None:
            return problem
        if failing and self.failure == "trickle":
            status, reply_headers, content = self._served(method, path, headers, body)
            return status, reply_headers, Trickled(content)
        if failing:
            return failure_reply(self.failure, path, retry_after_ms=self.retry_after_ms,
                                 model_override=self.model_override)
        return self._served(method, path, headers, body)

    def _served(self, method, path, headers, body) -> Reply:
        if not headers.get("authorization", "").startswith("Bearer "):
            return error_reply(401, "unauthorized", "missing Bearer API key")
        if (method, path) == ("GET", "/v1/models"):
            about = "replayed from a recording by the loopback server"
            models = [
                {"name": name, "description": about, "release_date": "1970-01-01"}
                for name in self._models()
            ]
            return json_reply(200, {"models": models})
        if (method, path) == ("POST", "/v1/systemone"):
            return self._replay(body)
        return error_reply(404, "not_found", f"no route {method} {path}")

    def _replay(self, body: object) -> Reply:
        if not (
            isinstance(body, dict)
            and isinstance(body.get("model"), str)
            and "state" in body
            and isinstance(body.get("questions"), dict)
        ):
            detail = {"loc": ["body"], "msg": "expected an object with state, model and questions",
                      "type": "missing"}
            return json_reply(422, {"detail": [detail]})
        if self.answer_with is not None:
            return json_reply(200, self.answer_with(body))
        key = recording_key(body["model"], body["state"], body["questions"])
        recorded = self.recording.get(key)
        with self._lock:
            if recorded is None:
                self._misses += 1
            else:
                self._hits += 1
        if recorded is None:
            return error_reply(404, "not_recorded", f"no recorded answer for key {key!r}", key=key)
        if self.model_override is not None:
            recorded = {**recorded, "model": self.model_override}
        return json_reply(200, recorded)

    def _models(self) -> list[str]:
        names = {entry.get("model") for entry in self.recording.values() if isinstance(entry, dict)}
        return sorted(name for name in names | {self.model_override} if isinstance(name, str))


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0 (the default): one request per connection, so after a stop nothing is served.
    server_version = "LoopbackSystemOne/1"

    def _handle(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        path = self.path.split("?", 1)[0]
        reply = self.server.owner.answer(self.command, path, headers, raw)  # type: ignore[attr-defined]
        if reply is None:  # drop without answering
            self.close_connection = True
            return
        status, reply_headers, content = reply
        owner = self.server.owner  # type: ignore[attr-defined]
        try:
            self.send_response(status)
            for name, value in {**reply_headers, "Content-Length": str(len(content))}.items():
                self.send_header(name, value)
            self.end_headers()
            if not isinstance(content, Trickled):
                self.wfile.write(content)
                return
            for index in range(len(content)):
                self.wfile.write(content[index : index + 1])
                self.wfile.flush()
                if owner.stopped.wait(owner.trickle_seconds):
                    break
            self.close_connection = True
        except OSError:  # the client gave up (e.g. timed out) first
            self.close_connection = True

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: object) -> None:
        logger.info("%s %s", self.address_string(), format % args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", required=True, help="cooksafe JsonCache file to replay")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--failure", choices=FAILURES, help="inject this failure")
    parser.add_argument("--failure-count", type=int, help="fail only the first N requests")
    parser.add_argument("--model-override", help="answer with this model id")
    parser.add_argument("--max-requests", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--trickle-seconds", type=float, default=1.0,
                        help="with --failure trickle: seconds between the body's bytes")
    parser.add_argument("--echo-headers", action="store_true",
                        help="repeat the request's headers in every error answer")
    args = vars(parser.parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with LoopbackSystemOne(args.pop("recording"), **args) as server:
        try:  # Ctrl-C may come as soon as the address is out
            print(server.base_url, flush=True)
            server.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
