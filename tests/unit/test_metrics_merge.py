"""Two processes' metrics as one exposition (`mnemo serve` and its job worker)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.core.metrics import Metrics, families_of, merge_expositions, merge_families, snapshot


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
    }


def test_counters_add_up_and_gauges_keep_the_api_value() -> None:
    api, worker = Metrics(), Metrics()
    api.misses.labels("explicit", "restored").inc(2)
    worker.misses.labels("explicit", "restored").inc(1)
    worker.misses.labels("reask", "restored").inc(3)
    worker.compressions.labels("rules", "token_threshold").inc(4)
    worker.compression_ratio.observe(5.0)
    api.http_latency.labels("GET", "/healthz", "200").observe(0.004)
    api.queue_depth.labels("queued").set(7)
    worker.queue_depth.labels("queued").set(0)  # a worker never sets it; if it did
    merged = merge_expositions(
        [generate_latest(api.registry).decode(), generate_latest(worker.registry).decode()]
    )
    samples = _samples(merged)
    assert (
        samples[("mnemo_misses_total", (("detection", "explicit"), ("outcome", "restored")))] == 3
    )
    assert samples[("mnemo_misses_total", (("detection", "reask"), ("outcome", "restored")))] == 3
    assert (
        samples[
            ("mnemo_compressions_total", (("extractor", "rules"), ("trigger", "token_threshold")))
        ]
        == 4
    )
    assert samples[("mnemo_compression_ratio_count", ())] == 1
    assert samples[("mnemo_compression_ratio_bucket", (("le", "8.0"),))] == 1
    assert samples[("mnemo_job_queue_depth", (("status", "queued"),))] == 7
    route = (("method", "GET"), ("route", "/healthz"), ("status", "200"))
    assert samples[("mnemo_http_request_duration_seconds_count", route)] == 1
    # Every metric once: one HELP line per name.
    helps = [line.split()[2] for line in merged.decode().splitlines() if line.startswith("# HELP")]
    assert len(helps) == len(set(helps))


def test_one_exposition_comes_back_unchanged() -> None:
    api = Metrics()
    api.turns_ingested.inc(9)
    api.context_tokens.observe(700)
    text = generate_latest(api.registry)
    assert _samples(merge_expositions([text.decode()])) == _samples(text)


def test_published_families_merge_like_the_text_they_replace() -> None:
    """What a job worker publishes (``snapshot``), merged with the API's registry, gives
    the samples that parsing both text expositions gave."""
    api, worker = Metrics(), Metrics()
    api.misses.labels("explicit", "restored").inc(2)
    api.http_latency.labels("GET", "/healthz", "200").observe(0.004)
    api.queue_depth.labels("queued").set(7)
    worker.misses.labels("explicit", "restored").inc(1)
    worker.compressions.labels("rules", "milestone").inc(4)
    worker.compression_duration.labels("rules").observe(0.03)
    worker.queue_depth.labels("queued").set(0)
    text = merge_expositions(
        [generate_latest(api.registry).decode(), generate_latest(worker.registry).decode()]
    )
    published = merge_families([api.registry.collect(), families_of(snapshot(worker))])
    assert _samples(published) == _samples(text)
    assert published.decode().count("# HELP mnemo_misses_total") == 1
