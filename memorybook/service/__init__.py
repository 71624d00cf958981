"""The memory service: a FastAPI app that routes tickets with memory (the `service` extra:
`pip install "path/to/clone[service]"`).

    uvicorn --factory memorybook.service:create_app      # or: make serve

`POST /tickets` takes a ticket's state (customer, ticket) and returns the routing response
before the gate; `GET /customers/{id}/memories` lists a customer's memories once their pending
gates have finished, `GET /customers/{id}/memories/{ticket}` those of one ticket; `DELETE`
erases them, of the customer or of one ticket (a damaged one too); `GET
/customers/{id}/history` lists what happened to them (events, never content); `GET /health`
answers a load balancer's probe. Each route is a call on the app's AsyncMemory
(memorybook/serving.py), which an app of its own holds the same way: it starts and stops with
the service, keeps each customer's calls in order (across processes on PostgreSQL), records each
gate in the store before its reply (one left by a process that died runs in the next one up),
and sweeps expired memories. The package: app.py (create_app()), routes.py, failures.py (errors
as answers), logs.py (the log lines' format, each request's id); every request passes the
guard first (memorybook/service_guard.py); the contract, the id rule and every status answered
are in memorybook/service_models.py and `/openapi.json`.

Running it. Its settings (memorybook/settings.py; README.md's table lists each variable) come
from the environment when the app is made, unless given: TYPESAFE_API_KEY (none: replay only)
and TYPESAFE_ENDPOINT; MEMORYBOOK_STORE_URL (by default a SQLite file in .memorybook/ of the
nearest folder holding a pyproject.toml, else the working one) and MEMORYBOOK_STORE_KEY
(PostgreSQL needs it; SQLite makes a key file beside the database and logs where: back it up with
it); MEMORYBOOK_MAX_IN_FLIGHT, MEMORYBOOK_TIMEOUT_SECONDS and the service's own.
- It asks Jev live or replays a recording, never records: that would keep each ticket's words
  in the recording, in clear, so a start in record mode is refused.
- Replicas share a PostgreSQL store; a process holds at most twice MEMORYBOOK_MAX_IN_FLIGHT
  connections for customers' turns (memorybook/store/turns.py) and one for its store: 17 by
  default. A SQLite file takes one process: a second, or `uvicorn --workers 2`, is refused at
  startup (uvicorn then exits 0 after stopping the first).
- A request takes at most about twice MEMORYBOOK_TIMEOUT_SECONDS, plus that again when it
  waits for the customer's earlier calls: its turn, then a slot to Jev, then the call, each
  bounded. Set a proxy's time-outs and a shutdown's grace above that.
- SIGTERM stops taking requests, runs the pending gates and exits with 143 (uvicorn re-raises
  the signal); a gate killed before its end runs on the next start.
- `GET /health` reads no store: it says the process answers, not that its store does; `GET
  /ready` says that, within 2 s, and is a 503 while the service stops (memorybook/readiness.py).
- `GET /metrics` serves Prometheus's text, behind the token (memorybook/metrics.py lists each
  metric; counting.py counts the requests by route and status): ids and words in none.
- uvicorn times out neither slow bodies nor idle connections: put a reverse proxy in front.
  Behind one on this machine, the service sees itself reached on loopback, so set
  MEMORYBOOK_SERVICE_TOKEN there too.
- A memory changed or damaged outside the service stops its customer's calls and reads with a
  409 naming its ticket, until that ticket's memories (or the customer's) are erased.
- A gate that fails (its call to Jev, say) is logged and its memory not kept; it is not
  retried. A ticket posted again once its gate kept it (a client's retry) is asked as the first
  time, with the memories saved before its own, and not gated again (memorybook/wrapper.py).
"""

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
except ModuleNotFoundError as missing:  # an install without the extra
    raise ModuleNotFoundError(
        f"memorybook.service needs FastAPI and prometheus-client ({missing.name} is missing), "
        "which memorybook's `service` extra brings: pip install 'memorybook[service]' (from a "
        "clone: 'path/to/clone[service]').", name=missing.name) from None

from memorybook.service.app import create_app

__all__ = ["create_app"]
