"""Prometheus metrics. One registry per app (so tests and replicas never collide)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
TOKEN_BUCKETS = (64, 128, 256, 512, 1000, 2000, 2500, 4000, 8000, 16000, 32000, 64000, 128000)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.http_latency = Histogram(
            "mnemo_http_request_duration_seconds",
            "HTTP request latency by route",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.turns_ingested = Counter(
            "mnemo_turns_ingested_total", "Turns stored (duplicates not counted)", registry=r
        )
        self.context_tokens = Histogram(
            "mnemo_context_tokens",
            "Tokens of each context served",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.history_tokens = Histogram(
            "mnemo_history_tokens",
            "Tokens the full raw history of the session would have cost, per context served",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.compressions = Counter(
            "mnemo_compressions_total",
            "Compressions committed",
            ["extractor", "trigger"],
            registry=r,
        )
        self.compression_ratio = Histogram(
            "mnemo_compression_ratio",
            "Input tokens / rendered state tokens",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.compression_duration = Histogram(
            "mnemo_compression_duration_seconds",
            "Duration of a compression",
            ["extractor"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.extractor_fallbacks = Counter(
            "mnemo_extractor_fallbacks_total",
            "LLM extraction failures that fell back to rules",
            registry=r,
        )
        self.units_dropped = Counter(
            "mnemo_units_dropped_total",
            "Extracted units (or turns) left out of a compression because they failed validation",
            registry=r,
        )
        self.jobs = Counter("mnemo_jobs_total", "Job outcomes", ["kind", "outcome"], registry=r)
        self.jobs_pruned = Counter(
            "mnemo_jobs_pruned_total",
            "Finished jobs deleted after MNEMO_JOB_RETENTION_DAYS",
            registry=r,
        )
        self.queue_depth = Gauge("mnemo_job_queue_depth", "Jobs by status", ["status"], registry=r)
        self.queue_oldest_age = Gauge(
            "mnemo_job_queue_oldest_age_seconds", "Age of the oldest queued job", registry=r
        )
        self.llm_calls = Counter(
            "mnemo_llm_calls_total", "LLM calls by outcome", ["outcome"], registry=r
        )
        self.llm_tokens = Counter(
            "mnemo_llm_tokens_total",
            "Tokens the LLM extractor's calls used, as the API reported them",
            ["kind"],
            registry=r,
        )
        self.llm_latency = Histogram(
            "mnemo_llm_latency_seconds", "LLM call latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.memory_hits = Counter(
            "mnemo_memory_retrieval_hits_total",
            "Long-term memories placed into contexts",
            registry=r,
        )
        self.misses = Counter(
            "mnemo_misses_total",
            "Misses: what an agent needed that compression had taken away, by how it was"
            " detected and whether archived turns were restored",
            ["detection", "outcome"],
            registry=r,
        )
        self.memories_expired = Counter(
            "mnemo_memories_expired_total", "Memories deleted by the TTL sweep", registry=r
        )
        self.units_restamped = Counter(
            "mnemo_units_restamped_total",
            "Live user turns whose units record, stale after an upgrade, the sweep stored again",
            registry=r,
        )


def set_queue_gauges(metrics: Metrics, counts: Iterable[tuple[str, int, float]]) -> None:
    """Queue gauges from (status, jobs, age of the oldest in seconds), read at scrape time
    (they are shared by all replicas)."""
    seen = {status: (n, age) for status, n, age in counts}
    for status in ("queued", "running", "dead"):
        metrics.queue_depth.labels(status).set(seen[status][0] if status in seen else 0)
    queued = seen.get("queued")
    metrics.queue_oldest_age.set(float(queued[1]) if queued else 0.0)


def merge_expositions(texts: Sequence[str]) -> bytes:
    """Several processes' Prometheus text expositions as one (``merge_families``)."""
    return merge_families([text_string_to_metric_families(text) for text in texts])


def merge_families(groups: Sequence[Iterable[Metric]]) -> bytes:
    """Several processes' metric families as one exposition, the first process's first:
    counters and histograms add up sample by sample (an API process and the job worker
    beside it count different events of the same metric, e.g. misses); a gauge keeps the
    first value given for its labels (the queue gauges are set by the API process only),
    except a ``_created`` timestamp, which keeps the earliest."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for group in groups:
        for family in group:
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            samples = values.setdefault(merged.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key not in samples:
                    samples[key] = sample.value
                elif sample.name.endswith("_created"):
                    samples[key] = min(samples[key], sample.value)
                elif family.type != "gauge":
                    samples[key] += sample.value
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)

    class Merged:
        def collect(self) -> Iterator[Metric]:
            return iter(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())
    return generate_latest(registry)


# How often `mnemo serve`'s job worker publishes its counters (``publish``): a scrape of
# the API sees them at most this old.
PUBLISH_EVERY_S = 0.5


def snapshot(metrics: Metrics) -> str:
    """``metrics``' families as JSON (``families_of`` reads it back): what a job worker
    publishes for the API process beside it, which then adds it to its own without
    parsing a text exposition (the parse was 16 % of a loaded API's profile) and without
    asking the worker, whose CPU priority is the lowest there is."""
    return json.dumps(
        [
            [
                f.name,
                f.documentation,
                f.type,
                f.unit,
                [[s.name, s.labels, s.value] for s in f.samples],
            ]
            for f in metrics.registry.collect()
        ]
    )


def families_of(text: str) -> list[Metric]:
    """The families of a ``snapshot``."""
    families = []
    for name, documentation, kind, unit, samples in json.loads(text):
        family = Metric(name, documentation, kind, unit)
        for sample_name, labels, value in samples:
            family.add_sample(sample_name, labels, value)
        families.append(family)
    return families


def publish(metrics: Metrics, path: Path, *, last: str | None = None) -> str:
    """Write ``snapshot(metrics)`` to ``path`` when it differs from ``last`` (the text
    published before), whole or not at all (a temporary file renamed over it); return
    the snapshot."""
    text = snapshot(metrics)
    if text != last:
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)
    return text
