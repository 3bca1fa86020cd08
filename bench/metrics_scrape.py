"""The CPU of one ``/metrics`` scrape's merge in the API process, in-process.

`mnemo serve`'s API adds its job worker's counters to its own at each scrape. Before:
the API rendered its registry as text, fetched the worker's text exposition and parsed
both (``merge_expositions``). Now: the worker publishes its families as JSON
(``snapshot``) and the API merges them with its registry's own (``merge_families``):
no text is parsed. Both sides here start from the same registries, filled as after a
``bench.latency`` run (every route and status the benchmark hits, every job kind and
outcome, compressions by trigger); the HTTP fetch of the old way is not counted, which
flatters the old way, not the new one. Both outputs are checked to hold the same samples.

    python -m bench.metrics_scrape [--scrapes 2000]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.core.jobs import JobKind
from app.core.metrics import Metrics, families_of, merge_expositions, merge_families, snapshot

ROUTES = (
    ("POST", "/v1/sessions/{session_id}/turns", "201"),
    ("GET", "/v1/sessions/{session_id}/context", "200"),
    ("GET", "/v1/sessions/{session_id}", "200"),
    ("GET", "/healthz", "200"),
    ("GET", "/readyz", "200"),
    ("GET", "/metrics", "200"),
    ("POST", "/v1/users/{user_id}/memories", "201"),
    ("GET", "/v1/users/{user_id}/memories", "200"),
    ("POST", "/v1/sessions/{session_id}/turns", "422"),
    ("GET", "/v1/sessions/{session_id}/context", "404"),
)
TRIGGERS = ("token_threshold", "milestone", "repeated_tool_call", "tool_failures", "topic_drift")


def filled(rng: random.Random) -> tuple[Metrics, Metrics]:
    """An API process's registry and its job worker's, as after a benchmark."""
    api, worker = Metrics(), Metrics()
    for method, route, status in ROUTES:
        for _ in range(50):
            api.http_latency.labels(method, route, status).observe(rng.expovariate(200))
    for _ in range(200):
        api.context_tokens.observe(rng.randint(200, 2500))
        api.history_tokens.observe(rng.randint(500, 20000))
    api.turns_ingested.inc(30_000)
    api.memory_hits.inc(900)
    api.queue_depth.labels("queued").set(12)
    for kind in JobKind:
        for outcome in ("done", "retried", "dead"):
            worker.jobs.labels(kind.value, outcome).inc(rng.randint(1, 500))
    for trigger in TRIGGERS:
        worker.compressions.labels("rules", trigger).inc(rng.randint(1, 300))
        for _ in range(30):
            worker.compression_ratio.observe(rng.uniform(1, 40))
            worker.compression_duration.labels("rules").observe(rng.expovariate(30))
    worker.misses.labels("reask", "restored").inc(3)
    return api, worker


def cpu_per_scrape(scrape: Callable[[], bytes], scrapes: int) -> float:
    began = time.process_time()
    for _ in range(scrapes):
        scrape()
    return (time.process_time() - began) / scrapes * 1000


def samples(text: bytes) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_scrape", description=__doc__)
    parser.add_argument("--scrapes", type=int, default=2000)
    args = parser.parse_args(argv)
    api, worker = filled(random.Random(7))
    worker_text = generate_latest(worker.registry).decode()  # what the worker served
    published = snapshot(worker)  # what it publishes now

    def before() -> bytes:
        return merge_expositions([generate_latest(api.registry).decode(), worker_text])

    def after() -> bytes:
        return merge_families([api.registry.collect(), families_of(published)])

    if samples(before()) != samples(after()):
        raise SystemExit("the two merges differ")
    lines, theirs = len(before().splitlines()), len(worker_text.splitlines())
    print(f"exposition: {lines} lines ({theirs} the worker's)")
    for turn in range(2):  # alternating passes: the box's load moves both alike
        old, new = cpu_per_scrape(before, args.scrapes), cpu_per_scrape(after, args.scrapes)
        print(f"pass {turn + 1}: text parsed {old:.3f} ms, families {new:.3f} ms CPU a scrape")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
