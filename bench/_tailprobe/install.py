"""What the probe patches, per role; see sitecustomize.py. Bench only: never in app/."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import gc
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

now = time.perf_counter
FLUSH_AT = 500_000
_records: list[dict[str, Any]] = []
_lock = threading.Lock()
_current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "tail_probe", default=None
)


def emit(record: dict[str, Any]) -> None:
    with _lock:
        _records.append(record)


class _Writer:
    def __init__(self, path: str) -> None:
        self.path = path

    def flush(self) -> None:
        with _lock:
            batch = _records[:]
            del _records[:]
        if batch:
            with open(self.path, "a") as f:
                for r in batch:
                    f.write(json.dumps(r) + "\n")


# ------------------------------------------------------------ patch on import


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patches[name](module)`` once the module ``name`` is loaded."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.patches:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader, patch = spec.loader, self.patches.pop(name)
        exec_module = loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def _timed(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (async) with its start and end added to the current request's steps."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current.get()
        t0 = now()
        try:
            return await fn(*args, **kwargs)
        finally:
            if rec is not None:
                rec["steps"].append((step, t0, now()))

    return wrapper


def _timed_sync(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current.get()
        t0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            if rec is not None:
                rec["steps"].append((step, t0, now()))

    return wrapper


# ------------------------------------------------------------ the API process


def _patch_httptools(module: Any) -> None:
    proto = module.HttpToolsProtocol
    received, headers_complete = proto.data_received, proto.on_headers_complete

    def data_received(self: Any, data: bytes) -> None:
        self._tail_arrived = now()
        received(self, data)

    def on_headers_complete(self: Any) -> None:
        self.scope["tail.arrived"] = getattr(self, "_tail_arrived", None)
        headers_complete(self)

    proto.data_received = data_received
    proto.on_headers_complete = on_headers_complete


_started = False
_tasks: set[asyncio.Task[None]] = set()


def _start_monitors(app: Any) -> None:
    global _started
    if _started:
        return
    _started = True
    loop = asyncio.get_running_loop()
    _tasks.add(loop.create_task(_loop_lag()))
    _tasks.add(loop.create_task(_backends(app)))
    if os.environ.get("TAIL_PROBE_HEAP"):  # its own pauses: off unless asked for
        _tasks.add(loop.create_task(_heap()))


async def _loop_lag(period: float = 0.002) -> None:
    """A timer's late wake-ups: what kept the loop from its callbacks."""
    while True:
        t0, c0 = now(), time.thread_time()
        await asyncio.sleep(period)
        late = now() - t0 - period
        if late > 0.001:
            # cpu: the loop's thread ran (a callback held it) or not (the OS ran others)
            emit({"t": "lag", "at": t0 + period, "late": late, "cpu": time.thread_time() - c0})


async def _backends(app: Any) -> None:
    """Which Postgres backend is whose (pid → application_name, backend type)."""
    from sqlalchemy import text

    while True:
        await asyncio.sleep(5)
        engine = getattr(app.state, "engine", None)
        if engine is None:
            continue
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        text("SELECT pid, application_name, backend_type FROM pg_stat_activity")
                    )
                ).all()
            emit({"t": "backends", "at": now(), "rows": [list(r) for r in rows]})
        except Exception as exc:  # the probe never fails the service
            emit({"t": "probe_error", "what": repr(exc)})


async def _heap(every_s: float = 30.0) -> None:
    """What the collector's oldest generation holds (not the frozen startup objects):
    a full collection traverses all of it. Costs a pause of its own, every ``every_s``."""
    from collections import Counter

    while True:
        await asyncio.sleep(every_s)
        t0 = now()
        objects = gc.get_objects(generation=2)
        kinds = Counter(type(o).__qualname__ for o in objects)
        modules = Counter(getattr(type(o), "__module__", "?") for o in objects)
        emit(
            {
                "t": "heap",
                "at": t0,
                "s": now() - t0,
                "gen2": len(objects),
                "young": len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1)),
                "frozen": gc.get_freeze_count(),
                "types": kinds.most_common(25),
                "modules": modules.most_common(15),
            }
        )
        del objects


def _patch_middleware(module: Any) -> None:
    cls = module.ObservabilityMiddleware
    call = cls.__call__

    async def __call__(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await call(self, scope, receive, send)
            return
        _start_monitors(scope["app"]) if "app" in scope else None
        rec: dict[str, Any] = {
            "t": "req",
            "path": scope["path"],
            "arrived": scope.get("tail.arrived"),
            "entered": now(),
            "steps": [],
        }
        for name, value in scope.get("headers") or ():
            if name == b"x-request-id":
                rec["rid"] = value.decode("latin-1")

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                rec["status"] = message["status"]
                rec["head_at"] = now()
            elif message["type"] == "http.response.body":
                rec["bytes"] = len(message.get("body", b""))
                t0 = now()
                await send(message)
                rec["body_at"], rec["body_sent"] = t0, now()
                return
            await send(message)

        token = _current.set(rec)
        try:
            await call(self, scope, receive, timed_send)
        finally:
            rec["left"] = now()
            _current.reset(token)
            emit(rec)

    cls.__call__ = __call__


def _patch_context_store(module: Any) -> None:
    cls = module.ContextConnection
    enter = cls.__aenter__

    async def __aenter__(self: Any) -> Any:
        rec = _current.get()
        pool = self._engine.pool
        if rec is not None:
            rec["pool_out"] = pool.checkedout()
        t0 = now()
        out = await enter(self)
        if rec is not None:
            rec["steps"].append(("checkout", t0, now()))
        return out

    cls.__aenter__ = __aenter__
    cls.sqlalchemy = _timed("sqlalchemy_conn", cls.sqlalchemy)


def _patch_context_service(module: Any) -> None:
    for name in ("read_context", "read_live_user_turns", "read_state_in_force", "memory_block"):
        setattr(module, name, _timed(name, getattr(module, name)))
    module.pack = _timed_sync("pack", module.pack)


def _patch_sessions_route(module: Any) -> None:
    module.context_on = _timed("context_on", module.context_on)
    module.context_json = _timed_sync("json", module.context_json)


def _patch_gc() -> None:
    began: dict[str, float] = {}

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began["t"], began["cpu"] = now(), time.thread_time()
        else:
            t0 = began.get("t", now())
            emit(
                {
                    "t": "gc",
                    "at": t0,
                    "s": now() - t0,
                    "cpu": time.thread_time() - began.get("cpu", 0.0),
                    "gen": info["generation"],
                    "collected": info["collected"],
                }
            )

    gc.callbacks.append(callback)


# ------------------------------------------------------------ the job worker


def _patch_worker(module: Any) -> None:
    cls = module.Worker
    run_job = cls._run_job

    async def _run_job(self: Any, job: Any) -> None:
        t0, c0 = now(), time.process_time()
        try:
            await run_job(self, job)
        finally:
            emit(
                {
                    "t": "job",
                    "kind": job.kind,
                    "at": t0,
                    "s": now() - t0,
                    "cpu": time.process_time() - c0,
                }
            )

    cls._run_job = _run_job


def _flusher(writer: _Writer) -> None:
    # Written at exit, or when many: encoding them holds the GIL (the loop waits), and
    # a flush each second stalled the API's loop ~40 ms each time.
    while True:
        time.sleep(1.0)
        if len(_records) > FLUSH_AT:
            writer.flush()


def run(role: str, directory: str) -> None:
    writer = _Writer(os.path.join(directory, f"{role}-{os.getpid()}.jsonl"))
    atexit.register(writer.flush)
    threading.Thread(target=_flusher, args=(writer,), daemon=True, name="tail-probe").start()
    _patch_gc()
    if role == "api":
        patches: dict[str, Callable[[Any], None]] = {
            "uvicorn.protocols.http.httptools_impl": _patch_httptools,
            "app.api.middleware": _patch_middleware,
            "app.stores.context": _patch_context_store,
            "app.services.context": _patch_context_service,
            "app.api.routes.sessions": _patch_sessions_route,
        }
    else:
        patches = {"app.worker": _patch_worker}
    sys.meta_path.insert(0, _AfterImport(patches))
