"""bench/api_routes.py's count of a Prefect server's requests, on a hand-written access log."""

from collections import Counter

from bench.api_routes import count_routes, table

RUN_A, RUN_B = "9b2e61a4-5c1e-4f0b-8a43-0d7f6a1c2b3e", "0c6a7d52-1111-4a2b-9c3d-4e5f60718293"
CLIENT = "5d4c3b2a-1f0e-4d9c-8b7a-695847362514"
LOG = f"""\
INFO:     Started server process [3250]
INFO:     127.0.0.1:40012 - "POST /api/flow_runs/filter HTTP/1.1" 200 OK
INFO:     127.0.0.1:40012 - "POST /api/flow_runs/{RUN_A}/set_state HTTP/1.1" 201 Created
INFO:     127.0.0.1:40013 - "POST /api/flow_runs/{RUN_B}/set_state HTTP/1.1" 201 Created
INFO:     127.0.0.1:40014 - "GET /api/csrf-token?client={CLIENT} HTTP/1.1" 200 OK
INFO:     127.0.0.1:40012 - "POST /api/flow_runs/filter HTTP/1.1" 200 OK
a log line that quotes "POST /api/x" without a protocol is not a request
"""


def test_requests_are_counted_by_route_with_ids_folded():
    assert count_routes(LOG) == Counter({
        "POST /api/flow_runs/filter": 2,
        "POST /api/flow_runs/{id}/set_state": 2,
        "GET /api/csrf-token?client={id}": 1,
    })


def test_the_table_puts_the_busiest_route_of_the_largest_run_first_and_sums_each_run():
    small = Counter({"POST /api/logs/": 3, "POST /api/flow_runs/filter": 2})
    large = Counter({"POST /api/logs/": 3, "POST /api/flow_runs/filter": 9})
    lines = table({8000: large, 2000: small}).splitlines()
    assert lines[0] == "| route | 2000 calls | 8000 calls |"
    assert lines[2] == "| `POST /api/flow_runs/filter` | 2 | 9 |"
    assert lines[3] == "| `POST /api/logs/` | 3 | 3 |"
    assert lines[-1] == "| all | 5 | 12 |"
