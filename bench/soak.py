"""Soak test: many agents at once against the real service, then an audit of the archive.

    python -m bench.soak --out soak.json [--clients 32 --duration 60 --sessions 400
                                          --warmup 5 --url URL --seed 7]

Starts ``mnemo serve`` (embedded Postgres in a temporary directory, the embedded
worker on, a small model window, ``MNEMO_MODEL_WINDOW_TOKENS=4096``, so the worker
compresses sessions while the clients post), unless ``--url`` names a running
service. Then C concurrent clients (one asyncio process, one keep-alive
connection each, loopback only) run a mix of operations for D seconds across
S sessions:

* ``post``: an agent step — a user message; an assistant tool call with its tool
  result; an assistant reply; or all four — every message with a client id;
* ``retry``: an acknowledged post sent again unchanged (its response was "lost");
  every message must come back ``duplicate: true`` with its original ``seq``;
* ``race``: a new post sent twice at once; each message must be stored once;
* ``context``: ``GET /context`` with a random budget (some with ``query``);
  ``tokens ≤ max_tokens`` is checked;
* ``memory_write`` / ``memory_search``: long-term memory of the sessions' users;
* ``session``: ``GET /v1/sessions/{id}``.

After the load (and a bounded wait for the job queue to drain) the audit reads
every session's archive (``GET /turns``, paginated): every message acknowledged
with 201 is there exactly once, with the seq, role and content it was
acknowledged with; seqs are 1…n without gaps; ``turn_count`` agrees. The run
exits 1 if the audit fails or any request failed.

Caveat: the load generator shares the machine with the server and Postgres (on
a 2-core machine, three processes compete for two cores); its CPU is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.stores.queue import OLDEST_DUE
from bench._service import Service, running_service
from bench.latency import CHINESE, _loadavg, _sentence, exchange, machine, percentile

LAG_EVERY_S = 5.0  # how often the queue's lag is read during the load

# What the figures are judged against (32 clients, 2 shared cores).
TARGETS = {
    "errors": ("≤", 0.0),
    "lost_turns": ("≤", 0.0),
    "duplicated_turns": ("≤", 0.0),
    "context_p99_ms": ("≤", 25.0),
}

# The operation mix: relative weights.
MIX = {
    "post": 40,
    "retry": 4,
    "race": 2,
    "context": 42,
    "memory_write": 4,
    "memory_search": 4,
    "session": 4,
}

SERVICE_ENV = {
    # A small agent window so live history crosses the trigger within a few steps.
    "MNEMO_MODEL_WINDOW_TOKENS": "4096",
    "MNEMO_EMBEDDED_WORKER": "true",
}

REQUEST_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 60.0
AUDIT_CONCURRENCY = 8
AUDIT_PAGE = 1000
AUDIT_TIMEOUT_S = 600.0
USERS_PER_SESSION_GROUP = 4  # sessions 0–3 belong to user 0, 4–7 to user 1, …

MEMORY_TEXTS = (
    "Prefers aisle seats on flights longer than three hours.",
    "Allergic to penicillin.",
    "Works in the Lisbon office; time zone Europe/Lisbon.",
    "Budget for hotels is at most 180 EUR per night.",
    "Never schedule meetings before 9 am.",
    "喜欢靠窗的座位",
    "预算不超过三千元",
)
MEMORY_KINDS = ("preference", "profile", "rule", "fact")


# ---------------------------------------------------------------- bookkeeping


def digest(content: str | None) -> str | None:
    return None if content is None else hashlib.sha256(content.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Acked:
    """A message the service acknowledged as stored (201, ``duplicate: false``)."""

    seq: int
    role: str
    content: str | None


@dataclass
class SessionBook:
    """What the clients sent to one session and what the service answered."""

    id: str
    user: str
    next_message: int = 1
    acked: dict[str, Acked] = field(default_factory=dict)
    # Posts acknowledged in full, kept to be re-sent unchanged by `retry`.
    batches: list[list[dict[str, Any]]] = field(default_factory=list)
    # Ids of posts that failed: their fate is unknown (stored or not).
    unknown: set[str] = field(default_factory=set)

    def take_ids(self, n: int) -> int:
        """Reserve n message numbers (synchronously, so concurrent clients never share one)."""
        first = self.next_message
        self.next_message += n
        return first


@dataclass
class Violations:
    """Contract breaches seen while the load ran (the archive audit adds its own)."""

    retry_not_duplicate: int = 0
    retry_seq_changed: int = 0
    race_not_once: int = 0
    race_seq_mismatch: int = 0
    ack_shape: int = 0
    context_over_budget: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, what: str, detail: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        if len(self.examples) < 20:
            self.examples.append(f"{what}: {detail}")

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


@dataclass
class Recorder:
    """Latencies and statuses per operation (only while ``measuring``)."""

    measuring: bool = False
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    errors: Counter[str] = field(default_factory=Counter)
    first_errors: list[str] = field(default_factory=list)
    turns_acked: int = 0

    def record(self, op: str, seconds: float, status: str, ok: bool, detail: str = "") -> None:
        if not self.measuring:
            return
        self.latencies[op].append(seconds)
        self.statuses[op][status] += 1
        if not ok:
            self.errors[status] += 1
            if len(self.first_errors) < 10:
                self.first_errors.append(f"{op} {status} {detail[:300]}")


@dataclass
class Soak:
    client: httpx.AsyncClient
    books: list[SessionBook]
    rng: random.Random
    rec: Recorder
    violations: Violations
    users_with_memories: set[str] = field(default_factory=set)

    # -------------------------------------------------------- one request, timed

    async def call(
        self, op: str, method: str, url: str, expect: int, **kwargs: Any
    ) -> httpx.Response | None:
        began = time.perf_counter()
        try:
            response = await self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            self.rec.record(op, time.perf_counter() - began, f"exc:{type(exc).__name__}", False)
            return None
        ok = response.status_code == expect
        detail = "" if ok else response.text
        self.rec.record(op, time.perf_counter() - began, str(response.status_code), ok, detail)
        return response if ok else None

    # -------------------------------------------------------- operations

    def batch(self, book: SessionBook) -> list[dict[str, Any]]:
        """The next agent step of a session, with fresh client message ids."""
        step = exchange(self.rng, book.id, 0)
        shape = self.rng.choices(("user", "tool", "reply", "all"), weights=(3, 3, 2, 2))[0]
        chosen = {"user": step[:1], "tool": step[1:3], "reply": step[3:], "all": step}[shape]
        first = book.take_ids(len(chosen))
        out: list[dict[str, Any]] = []
        for i, message in enumerate(chosen):
            message = dict(message, id=f"m-{first + i}")
            if message["role"] == "assistant" and message.get("tool_calls"):
                call_id = f"call-{book.id}-{first + i}"
                message["tool_calls"] = [
                    dict(message["tool_calls"][0], id=call_id),
                ]
            elif message["role"] == "tool":
                message["tool_call_id"] = out[-1]["tool_calls"][0]["id"]
            out.append(message)
        return out

    def remember(self, book: SessionBook, sent: list[dict[str, Any]], body: dict[str, Any]) -> bool:
        """Record the acknowledged messages; False if the answer is not well formed."""
        acks = body.get("turns", [])
        if len(acks) != len(sent) or [a.get("id") for a in acks] != [m["id"] for m in sent]:
            self.violations.note("ack_shape", f"{book.id}: {json.dumps(body)[:200]}")
            return False
        for message, ack in zip(sent, acks, strict=True):
            # A 201 says the message is stored at `seq`, whether by this post or an earlier one.
            if message["id"] in book.acked:
                continue
            book.acked[message["id"]] = Acked(ack["seq"], message["role"], message.get("content"))
            if self.rec.measuring:
                self.rec.turns_acked += 1
        return True

    async def post(self) -> None:
        book = self.rng.choice(self.books)
        sent = self.batch(book)
        body = {"user_id": book.user, "messages": sent}
        response = await self.call("post", "POST", f"/v1/sessions/{book.id}/turns", 201, json=body)
        if response is None:
            book.unknown.update(m["id"] for m in sent)
            return
        answer = response.json()
        if any(a.get("duplicate") for a in answer.get("turns", [])):
            self.violations.note("ack_shape", f"{book.id}: fresh ids answered as duplicates")
        if self.remember(book, sent, answer):
            book.batches.append(sent)

    async def retry(self) -> None:
        candidates = [b for b in self.rng.sample(self.books, min(8, len(self.books))) if b.batches]
        if not candidates:
            return await self.post()
        book = candidates[0]
        sent = self.rng.choice(book.batches)
        body = {"user_id": book.user, "messages": sent}
        response = await self.call("retry", "POST", f"/v1/sessions/{book.id}/turns", 201, json=body)
        if response is None:
            return None
        for message, ack in zip(sent, response.json().get("turns", []), strict=False):
            if not ack.get("duplicate"):
                self.violations.note("retry_not_duplicate", f"{book.id}/{message['id']}")
            elif ack.get("seq") != book.acked[message["id"]].seq:
                original = book.acked[message["id"]].seq
                self.violations.note(
                    "retry_seq_changed",
                    f"{book.id}/{message['id']}: {ack.get('seq')} vs {original}",
                )
        return None

    async def race(self) -> None:
        """The same new post twice at once: a client that timed out and retried at once."""
        book = self.rng.choice(self.books)
        sent = self.batch(book)
        body = {"user_id": book.user, "messages": sent}
        url = f"/v1/sessions/{book.id}/turns"
        answers = await asyncio.gather(
            self.call("race", "POST", url, 201, json=body),
            self.call("race", "POST", url, 201, json=body),
        )
        got = [a.json() for a in answers if a is not None]
        if not got:
            book.unknown.update(m["id"] for m in sent)
            return
        if len(got) == 2:
            self.check_race(book, sent, got)
        # The answer that stored the messages first, so `acked` keeps its seqs.
        got.sort(key=lambda answer: sum(a.get("duplicate", True) for a in answer.get("turns", [])))
        if all([self.remember(book, sent, answer) for answer in got]):
            book.batches.append(sent)

    def check_race(
        self, book: SessionBook, sent: list[dict[str, Any]], got: list[dict[str, Any]]
    ) -> None:
        """Of two identical posts, each message is stored by exactly one, at one seq."""
        fresh: dict[str, list[int]] = defaultdict(list)
        seqs: dict[str, set[int]] = defaultdict(set)
        for answer in got:
            for ack in answer.get("turns", []):
                seqs[ack["id"]].add(ack["seq"])
                if not ack["duplicate"]:
                    fresh[ack["id"]].append(ack["seq"])
        for message in sent:
            mid = message["id"]
            if len(fresh[mid]) != 1:
                self.violations.note("race_not_once", f"{book.id}/{mid}: fresh in {fresh[mid]}")
            if len(seqs[mid]) != 1:
                self.violations.note("race_seq_mismatch", f"{book.id}/{mid}: {seqs[mid]}")

    def started_books(self) -> list[SessionBook]:
        picks = self.rng.sample(self.books, min(8, len(self.books)))
        return [b for b in picks if b.acked]

    async def context(self) -> None:
        started = self.started_books()
        if not started:
            return await self.post()
        book = started[0]
        budget = self.rng.choice((1000, 2000, 2500, 4000))
        params: dict[str, Any] = {"max_tokens": budget}
        if self.rng.random() < 0.15:
            params["query"] = _sentence(self.rng, 2, 6)
        response = await self.call(
            "context", "GET", f"/v1/sessions/{book.id}/context", 200, params=params
        )
        if response is not None and response.json().get("tokens", 0) > budget:
            self.violations.note("context_over_budget", f"{book.id}: {response.json()['tokens']}")
        return None

    async def session(self) -> None:
        started = self.started_books()
        if not started:
            return await self.post()
        await self.call("session", "GET", f"/v1/sessions/{started[0].id}", 200)
        return None

    async def memory_write(self) -> None:
        started = self.started_books()
        user = started[0].user if started else self.rng.choice(self.books).user
        body = {
            "text": self.rng.choice(MEMORY_TEXTS)
            + ("" if self.rng.random() < 0.5 else " " + _sentence(self.rng, 3, 8)),
            "kind": self.rng.choice(MEMORY_KINDS),
            "pinned": self.rng.random() < 0.1,
        }
        if await self.call("memory_write", "POST", f"/v1/users/{user}/memories", 201, json=body):
            self.users_with_memories.add(user)

    async def memory_search(self) -> None:
        if not self.users_with_memories:
            return await self.memory_write()
        user = self.rng.choice(sorted(self.users_with_memories))
        query = self.rng.choice((*CHINESE, _sentence(self.rng, 2, 5), "seat preference"))
        await self.call(
            "memory_search",
            "GET",
            f"/v1/users/{user}/memories",
            200,
            params={"query": query, "limit": 5},
        )
        return None


# ---------------------------------------------------------------- load


async def run_clients(soaks: Sequence[Soak], seconds: float, think_s: float = 0.0) -> None:
    """Every client runs the mix until the deadline; bounded by time, never by luck."""
    deadline = time.monotonic() + seconds
    ops = list(MIX)
    weights = list(MIX.values())

    async def loop(soak: Soak) -> None:
        actions: dict[str, Callable[[], Awaitable[None]]] = {op: getattr(soak, op) for op in ops}
        while time.monotonic() < deadline:
            await actions[soak.rng.choices(ops, weights)[0]]()
            if think_s > 0:
                # An agent waits for its LLM between steps: exponential, mean think_s.
                await asyncio.sleep(min(soak.rng.expovariate(1 / think_s), think_s * 5))

    await asyncio.wait_for(
        asyncio.gather(*(loop(s) for s in soaks)), seconds + REQUEST_TIMEOUT_S * 2 + 10
    )


def metric_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, sample.labels, sample.value


async def scrape(client: httpx.AsyncClient) -> dict[str, Any]:
    """The figures the soak reports from /metrics."""
    response = await client.get("/metrics")
    response.raise_for_status()
    out: dict[str, Any] = {
        "compressions": 0.0,
        "compressions_by": {},
        "queue": {},
        "queue_oldest_age_s": 0.0,
        "jobs": {},
        "fallbacks": 0.0,
        "compression_s_sum": 0.0,
        "compression_count": 0.0,
        "compression_buckets": defaultdict(float),
    }
    for name, labels, value in metric_samples(response.text):
        if name == "mnemo_compressions_total":
            out["compressions"] += value
            key = f"{labels['extractor']}/{labels['trigger']}"
            out["compressions_by"][key] = out["compressions_by"].get(key, 0) + value
        elif name == "mnemo_job_queue_depth":
            out["queue"][labels["status"]] = value
        elif name == "mnemo_job_queue_oldest_age_seconds":
            out["queue_oldest_age_s"] = round(value, 2)
        elif name == "mnemo_jobs_total":
            out["jobs"][f"{labels['kind']}/{labels['outcome']}"] = value
        elif name == "mnemo_extractor_fallbacks_total":
            out["fallbacks"] = value
        elif name == "mnemo_compression_duration_seconds_sum":
            out["compression_s_sum"] += value
        elif name == "mnemo_compression_duration_seconds_count":
            out["compression_count"] += value
        elif name == "mnemo_compression_duration_seconds_bucket":
            out["compression_buckets"][float(labels["le"])] += value
    return out


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """The upper bound of the bucket holding quantile q (cumulative Prometheus buckets)."""
    total = buckets.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for bound in sorted(buckets):
        if buckets[bound] >= q * total:
            return bound
    return None


def compression_time(start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """Compressions run on the worker; with the embedded worker, on the API's event loop."""
    n = end["compression_count"] - start["compression_count"]
    spent = end["compression_s_sum"] - start["compression_s_sum"]
    buckets = {
        b: end["compression_buckets"][b] - start["compression_buckets"].get(b, 0.0)
        for b in end["compression_buckets"]
    }
    return {
        "count": n,
        "total_s": round(spent, 2),
        "mean_ms": round(spent / n * 1000, 1) if n else None,
        "p99_bucket_le_s": bucket_quantile(buckets, 0.99),
    }


async def drain(client: httpx.AsyncClient, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Wait (bounded) until no job is queued or running; return the wait and the figures."""
    began = time.monotonic()
    while True:
        figures = await scrape(client)
        busy = figures["queue"].get("queued", 0) + figures["queue"].get("running", 0)
        if busy == 0 or time.monotonic() - began > timeout_s:
            return time.monotonic() - began, figures
        await asyncio.sleep(0.5)


# ---------------------------------------------------------------- audit


@dataclass
class Audit:
    sessions: int = 0
    turns_in_archive: int = 0
    acked: int = 0
    lost_turns: int = 0
    duplicated_turns: int = 0
    seq_mismatch: int = 0
    content_mismatch: int = 0
    seq_gaps: int = 0
    turn_count_mismatch: int = 0
    stored_unacknowledged: int = 0
    unreadable_sessions: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, what: str, n: int, detail: str) -> None:
        setattr(self, what, getattr(self, what) + n)
        if len(self.examples) < 20:
            self.examples.append(f"{what}: {detail}")

    @property
    def failures(self) -> int:
        return (
            self.lost_turns
            + self.duplicated_turns
            + self.seq_mismatch
            + self.content_mismatch
            + self.seq_gaps
            + self.turn_count_mismatch
            + self.unreadable_sessions
        )


async def archive(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]] | None:
    """All turns of a session, oldest first; None if a page could not be read."""
    turns: list[dict[str, Any]] = []
    after: int | None = 0
    for _ in range(10_000):  # bounded: 10 M turns
        response = await client.get(
            f"/v1/sessions/{session}/turns", params={"after_seq": after, "limit": AUDIT_PAGE}
        )
        if response.status_code != 200:
            return None
        page = response.json()
        turns.extend(page["turns"])
        after = page["next_after_seq"]
        if after is None:
            return turns
    return None


async def audit_session(client: httpx.AsyncClient, book: SessionBook, audit: Audit) -> None:
    turns = await archive(client, book.id)
    summary = await client.get(f"/v1/sessions/{book.id}")
    if turns is None or summary.status_code != 200:
        audit.note("unreadable_sessions", 1, f"{book.id}: archive or summary unreadable")
        return
    audit.sessions += 1
    audit.turns_in_archive += len(turns)
    audit.acked += len(book.acked)
    seen = Counter(t["id"] for t in turns)
    for mid, n in seen.items():
        if n > 1:
            audit.note("duplicated_turns", n - 1, f"{book.id}/{mid} stored {n} times")
    by_id = {t["id"]: t for t in turns}
    for mid, ack in book.acked.items():
        stored = by_id.get(mid)
        if stored is None:
            audit.note("lost_turns", 1, f"{book.id}/{mid} (seq {ack.seq}) not in the archive")
            continue
        if stored["seq"] != ack.seq:
            audit.note(
                "seq_mismatch", 1, f"{book.id}/{mid}: acked {ack.seq}, stored {stored['seq']}"
            )
        if stored["role"] != ack.role or digest(stored["content"]) != digest(ack.content):
            audit.note("content_mismatch", 1, f"{book.id}/{mid}")
    seqs = [t["seq"] for t in turns]
    if seqs != list(range(1, len(turns) + 1)):
        audit.note("seq_gaps", 1, f"{book.id}: seqs {seqs[:5]}… not 1..{len(turns)}")
    if summary.json().get("turn_count") != len(turns):
        audit.note(
            "turn_count_mismatch",
            1,
            f"{book.id}: turn_count {summary.json().get('turn_count')}, archive {len(turns)}",
        )
    extra = [mid for mid in by_id if mid not in book.acked]
    unexplained = [mid for mid in extra if mid not in book.unknown]
    audit.stored_unacknowledged += len(extra)
    if unexplained:
        # Stored although no client ever sent it without an answer: a phantom turn.
        audit.note("duplicated_turns", len(unexplained), f"{book.id}: unexpected {unexplained[:3]}")


async def run_audit(client: httpx.AsyncClient, books: Sequence[SessionBook]) -> Audit:
    audit = Audit()
    gate = asyncio.Semaphore(AUDIT_CONCURRENCY)

    async def one(book: SessionBook) -> None:
        async with gate:
            try:
                await audit_session(client, book, audit)
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                audit.note("unreadable_sessions", 1, f"{book.id}: {type(exc).__name__}: {exc}")

    touched = [b for b in books if b.acked or b.unknown]
    await asyncio.wait_for(asyncio.gather(*(one(b) for b in touched)), AUDIT_TIMEOUT_S)
    return audit


# ---------------------------------------------------------------- the run


def op_figures(rec: Recorder, seconds: float) -> dict[str, dict[str, Any]]:
    out = {}
    for op in MIX:
        lat = sorted(s * 1000 for s in rec.latencies.get(op, []))
        out[op] = {
            "requests": len(lat),
            "req_per_s": round(len(lat) / seconds, 1),
            "p50_ms": round(percentile(lat, 50), 2),
            "p95_ms": round(percentile(lat, 95), 2),
            "p99_ms": round(percentile(lat, 99), 2),
            "max_ms": round(lat[-1], 2) if lat else None,
            "statuses": dict(rec.statuses.get(op, {})),
        }
    return out


async def soak(base_url: str, args: argparse.Namespace, service: Service | None) -> dict[str, Any]:
    run = f"soak{int(time.time()) % 100000}-{args.seed}"
    books = [
        SessionBook(id=f"{run}-s{i}", user=f"{run}-u{i // USERS_PER_SESSION_GROUP}")
        for i in range(args.sessions)
    ]
    rec = Recorder()
    violations = Violations()
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    clients = [
        httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits)
        for _ in range(args.clients)
    ]
    memory_users: set[str] = set()
    soaks = [
        Soak(
            client=c,
            books=books,
            rng=random.Random(f"{args.seed}:{i}"),
            rec=rec,
            violations=violations,
            users_with_memories=memory_users,
        )
        for i, c in enumerate(clients)
    ]
    admin = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(60.0))
    try:
        before = await scrape(admin)
        if args.warmup > 0:
            print(f"warming up for {args.warmup:g} s", file=sys.stderr)
            await run_clients(soaks, args.warmup, args.think_ms / 1000)
        print(f"soak: {args.clients} clients × {args.duration:g} s", file=sys.stderr)
        start = await scrape(admin)
        mark = await last_audited(service) if service else None
        rec.measuring = True
        cpu0, srv0 = time.process_time(), service.cpu_seconds() if service else None
        began = time.perf_counter()
        lags: list[tuple[float, float]] = []
        sampling = asyncio.create_task(sample_lag(service, lags)) if service else None
        await run_clients(soaks, args.duration, args.think_ms / 1000)
        seconds = time.perf_counter() - began
        if sampling is not None:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
        rec.measuring = False
        client_cpu = time.process_time() - cpu0
        srv1 = service.cpu_seconds() if service else None
        after_load = await scrape(admin)
        audited_load = await audited_since(service, mark) if service and mark is not None else None
        waited, drained = 0.0, after_load
        if not args.no_worker:
            print("draining the job queue", file=sys.stderr)
            waited, drained = await drain(admin, args.drain)
        audited = await audited_since(service, mark) if service and mark is not None else None
        print("auditing the archive", file=sys.stderr)
        audit_began = time.perf_counter()
        audit = await run_audit(admin, books)
        audit_s = time.perf_counter() - audit_began
    finally:
        await asyncio.gather(*(c.aclose() for c in clients), admin.aclose())
    total = sum(len(v) for v in rec.latencies.values())
    compressions = {
        "compressions_counted_from": "/metrics",
        "compressions_during_load": after_load["compressions"] - start["compressions"],
        "compressions_after_drain": drained["compressions"] - start["compressions"],
        "compressions_by_extractor_trigger": drained["compressions_by"],
        "extractor_fallbacks": drained["fallbacks"],
        "compression_time": compression_time(start, drained),
    }
    if audited_load is not None and audited is not None:
        compressions = {
            "compressions_counted_from": "compression_events",
            "compressions_during_load": audited_load["count"],
            "compressions_after_drain": audited["count"],
            "compressions_by_extractor_trigger": audited["by"],
            "extractor_fallbacks": audited["fallbacks"],
            "compression_time": audited["time"],
        }
    return {
        "seconds": round(seconds, 2),
        "requests": total,
        "req_per_s": round(total / seconds, 1),
        "turns_acked": rec.turns_acked,
        "turns_per_s": round(rec.turns_acked / seconds, 1),
        "ops": op_figures(rec, seconds),
        "errors": sum(rec.errors.values()),
        "errors_by_status": dict(rec.errors),
        "first_errors": rec.first_errors,
        "violations": violations.counts(),
        "violation_examples": violations.examples,
        "compressions_before_run": before["compressions"],
        **compressions,
        "queue_after_load": after_load["queue"]
        | {"oldest_age_s": after_load["queue_oldest_age_s"]},
        "queue_after_drain": drained["queue"],
        "lag_during_load": lag_figures(lags),
        "worker_switches": worker_switches(service),
        "drain_wait_s": round(waited, 1),
        "jobs": drained["jobs"],
        "server_cpu_s": None if srv0 is None or srv1 is None else round(srv1 - srv0, 1),
        "client_cpu_s": round(client_cpu, 1),
        "audit": {k: v for k, v in vars(audit).items() if k != "examples"}
        | {"failures": audit.failures, "seconds": round(audit_s, 1)},
        "audit_examples": audit.examples,
    }


# The same wait for compressions alone (the queue runs them before background work, so
# an indexing job can wait while compressions keep up).
OLDEST_DUE_COMPRESSION = OLDEST_DUE.text.replace(
    "run_after <= now()", "run_after <= now() AND kind = 'compress'"
)


async def connect_db(service: Service) -> Any:
    """A connection to the started service's embedded database."""
    import asyncpg

    return await asyncpg.connect(
        host=str(service.data_dir / "pg"), user="postgres", database="mnemo"
    )


# Every compression writes one audit row (``compression_events``) in its own
# transaction, whichever worker process ran it.
AUDITED_SINCE = """
    SELECT extractor, trigger, count(*) AS n, count(fallback_reason) AS fallbacks,
           sum(duration_ms) AS ms, max(id) AS last
    FROM compression_events WHERE id > $1 GROUP BY extractor, trigger
"""
AUDITED_P99_MS = """
    SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY duration_ms)
    FROM compression_events WHERE id > $1
"""


async def last_audited(service: Service) -> int:
    conn = await connect_db(service)
    try:
        return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM compression_events"))
    finally:
        await conn.close()


async def audited_since(service: Service, after_id: int) -> dict[str, Any]:
    """The compressions audited after ``after_id``: counted from the database, so a job
    worker that `mnemo serve`'s lag guard replaced keeps its share (its /metrics
    counters leave with it)."""
    conn = await connect_db(service)
    try:
        rows = await conn.fetch(AUDITED_SINCE, after_id)
        p99 = await conn.fetchval(AUDITED_P99_MS, after_id)
    finally:
        await conn.close()
    n = sum(r["n"] for r in rows)
    spent_ms = sum(r["ms"] for r in rows)
    return {
        "count": n,
        "by": {f"{r['extractor']}/{r['trigger']}": r["n"] for r in rows},
        "fallbacks": sum(r["fallbacks"] for r in rows),
        "time": {
            "count": n,
            "total_s": round(spent_ms / 1000, 2),
            "mean_ms": round(spent_ms / n, 1) if n else None,
            "p99_ms": None if p99 is None else round(p99, 1),
        },
    }


async def sample_lag(
    service: Service, out: list[tuple[float, float]], every_s: float = LAG_EVERY_S
) -> None:
    """Every ``every_s``, the queue's lag: how long the longest-waiting due job has
    waited (what `mnemo serve`'s lag guard reads; 0: no job due), and the same for
    compressions, from the database."""
    conn = await connect_db(service)
    try:
        while True:
            waited = [await conn.fetchval(q) for q in (OLDEST_DUE.text, OLDEST_DUE_COMPRESSION)]
            out.append((float(waited[0] or 0), float(waited[1] or 0)))
            await asyncio.sleep(every_s)
    finally:
        await conn.close()


def lag_figures(lags: Sequence[tuple[float, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": len(lags), "every_s": LAG_EVERY_S}
    for i, name in enumerate(("any", "compress")):
        seen = [lag[i] for lag in lags]
        out[name] = {
            "max_s": round(max(seen), 1) if seen else None,
            "last_s": round(seen[-1], 1) if seen else None,
            "series_s": [round(x) for x in seen],
        }
    return out


def worker_switches(service: Service | None) -> list[str]:
    """The lag guard's lines in serve's log (its job worker replaced, and why)."""
    if service is None or not service.log_path.exists():
        return []
    return [line for line in service.log_path.read_text().splitlines() if "restarts" in line]


def figures_of(result: dict[str, Any]) -> dict[str, float]:
    audit = result["audit"]
    v = result["violations"]
    return {
        "errors": float(result["errors"]),
        "lost_turns": float(audit["lost_turns"]),
        "duplicated_turns": float(
            audit["duplicated_turns"] + v["race_not_once"] + v["retry_not_duplicate"]
        ),
        "context_p99_ms": result["ops"]["context"]["p99_ms"],
    }


def verdicts(figures: dict[str, float]) -> dict[str, bool]:
    return {
        k: figures[k] <= target if op == "≤" else figures[k] >= target
        for k, (op, target) in TARGETS.items()
    }


def audit_passed(result: dict[str, Any]) -> bool:
    v = result["violations"]
    return result["audit"]["failures"] == 0 and not any(
        v[k]
        for k in (
            "retry_not_duplicate",
            "retry_seq_changed",
            "race_not_once",
            "race_seq_mismatch",
            "ack_shape",
        )
    )


def print_report(result: dict[str, Any]) -> None:
    p = result["parameters"]
    print(
        f"\nMnemo soak — {p['clients']} clients × {p['duration']:g} s over {p['sessions']} "
        f"sessions; {result['machine']['cpu_count']} CPUs; model window "
        f"{p['model_window_tokens']} tokens; embedded worker {p['embedded_worker']}; "
        f"think {p['think_ms']:g} ms; extra env {p['env'] or 'none'}"
    )
    head = f"{'operation':<15}{'requests':>9}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    print(head + "  statuses")
    print("-" * (len(head) + 10))
    for op, f in result["ops"].items():
        print(
            f"{op:<15}{f['requests']:>9}{f['req_per_s']:>9.1f}{f['p50_ms']:>9.2f}"
            f"{f['p99_ms']:>9.2f}{(f['max_ms'] or 0):>9.1f}  {f['statuses']}"
        )
    print(
        f"\n  total {result['requests']} requests, {result['req_per_s']:.1f} req/s; "
        f"{result['turns_acked']} turns acknowledged ({result['turns_per_s']:.1f}/s); "
        f"errors {result['errors']} {result['errors_by_status'] or ''}"
    )
    print(
        f"  compressions: {result['compressions_during_load']:g} during the load, "
        f"{result['compressions_after_drain']:g} after draining "
        f"({result['drain_wait_s']:g} s); by extractor/trigger "
        f"{result['compressions_by_extractor_trigger']}; fallbacks "
        f"{result['extractor_fallbacks']:g}; time {result['compression_time']}"
    )
    print(
        f"  job queue after the load {result['queue_after_load']}, after draining "
        f"{result['queue_after_drain']}"
    )
    lag = result["lag_during_load"]
    for name in ("any", "compress"):
        print(
            f"  queue lag during the load (oldest due {name} job's wait, every"
            f" {lag['every_s']:g} s): max {lag[name]['max_s']} s, last {lag[name]['last_s']} s;"
            f" {lag[name]['series_s']}"
        )
    for line in result["worker_switches"]:
        print(f"  {line}")
    a = result["audit"]
    print(
        f"  audit: {a['sessions']} sessions, {a['acked']} acknowledged turns, "
        f"{a['turns_in_archive']} in the archive ({a['stored_unacknowledged']} stored from "
        f"posts whose answer was lost); lost {a['lost_turns']}, duplicated "
        f"{a['duplicated_turns']}, seq mismatches {a['seq_mismatch']}, gaps {a['seq_gaps']}, "
        f"content mismatches {a['content_mismatch']}, turn_count mismatches "
        f"{a['turn_count_mismatch']}, unreadable {a['unreadable_sessions']}"
    )
    v = result["violations"]
    print(f"  during the load: {v}")
    print(
        f"  cpu: server process {result['server_cpu_s']} s, load generator "
        f"{result['client_cpu_s']} s (Postgres not counted) over {result['seconds']:g} s"
    )
    for line in result["first_errors"] + result["violation_examples"] + result["audit_examples"]:
        print(f"    {line}")
    print()
    figures, ok = result["figures"], result["meets_target"]
    for key, (op, target) in TARGETS.items():
        mark = "ok  " if ok[key] else "MISS"
        print(f"  {mark} {key:<18} {figures[key]:>10.2f}   target {op} {target:g}")
    print(f"  audit {'PASSED' if result['audit_passed'] else 'FAILED'}")
    print(
        "  caveat: the load generator shares the cores with the server and Postgres; "
        f"1-min load average before the run: {result['machine']['loadavg_1m_before']}"
    )
    print(
        "SUMMARY "
        + " ".join(f"{k}={v:g}" for k, v in figures.items())
        + f" req_per_s={result['req_per_s']:g} compressions={result['compressions_after_drain']:g}"
        + f" audit={'pass' if result['audit_passed'] else 'FAIL'}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured load")
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured load")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="mean pause of each client between requests (0: closed loop, as fast as answered)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=DRAIN_TIMEOUT_S,
        help="seconds to wait at most for the job queue to empty before the audit",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="MNEMO_X=V",
        help="extra setting for the started service (repeatable), e.g. MNEMO_EMBEDDER=hash",
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="MNEMO_EMBEDDED_WORKER=false: the API alone (no compressions; for comparison)",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="soak this running service (loopback only) instead of starting one; "
        "its settings are its own",
    )
    args = parser.parse_args(argv)
    for key in ("clients", "sessions"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be at least 1")
    if not 0 < args.duration <= 3600 or not 0 <= args.warmup <= 600:
        parser.error("--duration is 0–3600 s, --warmup 0–600 s")
    if not 0 <= args.think_ms <= 60_000 or not 0 <= args.drain <= 3600:
        parser.error("--think-ms is 0–60000, --drain 0–3600 s")
    for item in args.env:
        if not item.startswith("MNEMO_") or "=" not in item:
            parser.error(f"--env {item!r}: expected MNEMO_NAME=VALUE")
    if args.url is not None:
        host = httpx.URL(args.url).host
        if host not in ("127.0.0.1", "localhost", "::1"):
            parser.error("--url must be a loopback address (the soak never leaves the machine)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = _loadavg()
    with contextlib.ExitStack() as stack:
        service = None
        if args.url is None:
            env = SERVICE_ENV | ({"MNEMO_EMBEDDED_WORKER": "false"} if args.no_worker else {})
            env |= dict(item.split("=", 1) for item in args.env)
            service = stack.enter_context(running_service(extra_env=env))
            print(
                f"service ready in {service.start_s:.2f} s at {service.base_url}", file=sys.stderr
            )
        base_url = args.url or (service.base_url if service else "")
        result = asyncio.run(soak(base_url, args, service))
        rss = service.rss_mib() if service else None
    result = {
        "parameters": {
            "clients": args.clients,
            "duration": args.duration,
            "sessions": args.sessions,
            "warmup": args.warmup,
            "seed": args.seed,
            "url": args.url,
            "embedded_worker": None if args.url else not args.no_worker,
            "think_ms": args.think_ms,
            "env": args.env,
            "mix": MIX,
            "model_window_tokens": int(SERVICE_ENV["MNEMO_MODEL_WINDOW_TOKENS"])
            if args.url is None
            else None,
        },
        "machine": machine() | {"loadavg_1m_before": load_before},
        "server_rss_mib": None if rss is None else round(rss, 1),
        **result,
        "targets": {k: {"op": op, "value": v} for k, (op, v) in TARGETS.items()},
    }
    result["figures"] = figures_of(result)
    result["meets_target"] = verdicts(result["figures"])
    result["audit_passed"] = audit_passed(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print_report(result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if result["audit_passed"] and result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
