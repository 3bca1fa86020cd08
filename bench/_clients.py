"""What ``bench.drain_beside`` and ``bench.multiprocess`` share: their command line's
common part, 8 keep-alive clients in one asyncio process, a closed loop of requests
over them, and the latency figures of a phase."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import httpx

from bench.latency import percentile

CLIENTS = 8

Send = Callable[[httpx.AsyncClient], Awaitable[float]]


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's argument parser: its docstring as help, ``--out`` and ``--seed``."""
    p = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=7)
    return p


def keepalive_clients(base_url: str, n: int = CLIENTS) -> list[httpx.AsyncClient]:
    """``n`` clients of one keep-alive connection each."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return [httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) for _ in range(n)]


async def closed(
    clients: Sequence[httpx.AsyncClient], send: Send, total: int
) -> tuple[list[float], float]:
    """``total`` requests, each client sending its next when the last is answered: the
    latencies (ascending) and the wall seconds."""
    latencies: list[float] = []
    left = total
    began = time.perf_counter()

    async def loop(client: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            latencies.append(await send(client))

    await asyncio.gather(*(loop(c) for c in clients))
    return sorted(latencies), time.perf_counter() - began


def get(path: str | Callable[[], str]) -> Send:
    """A ``Send`` that GETs ``path`` (or the path the callable gives each time) and
    fails on any status but 2xx."""

    async def send(client: httpx.AsyncClient) -> float:
        began = time.perf_counter()
        (await client.get(path if isinstance(path, str) else path())).raise_for_status()
        return time.perf_counter() - began

    return send


def p50_p99_ms(latencies: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 of ascending latencies in seconds, in milliseconds."""
    return (
        round(percentile(latencies, 50) * 1000, 2),
        round(percentile(latencies, 99) * 1000, 2),
    )


def median(values: Sequence[float]) -> float:
    """The upper median (no mean of the two middle values: a figure that was measured)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
