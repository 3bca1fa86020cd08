"""Mnemo beside mem0, through the peers' own harness (``../shared/peers/compare_mem0.py``).

    python -m bench.peers --out-dir DIR [--embedders default,fake] [--mem0-python PY]
                          [--targets mem0_http,mem0_iter_http,mnemo] [-- HARNESS ARGS…]

For each embedder setting this starts a fresh ``mnemo serve`` (embedded Postgres in a
temporary directory, its job worker in a child process, as a user would start it;
``--in-process-worker`` runs it inside the API process instead) and runs the
harness against it, unchanged, with the mem0 venv's Python:

- ``default``: Mnemo with its default embedder (``use``, the multilingual USE model,
  512-d) — what a user gets;
- ``fake``: Mnemo's OpenAI-compatible embedder pointed at a second copy of the
  harness's ``fake_openai.py`` (the hashing embedder mem0 gets; asked for 512-d where
  mem0 asks for 384-d). That server's pid is counted as Mnemo's.

Mnemo runs with its query-vector cache off (``MNEMO_QUERY_CACHE_SIZE=0``) unless
``--query-cache`` is given: the harness draws its 500 questions from templates, so
about 46 % of them repeat one asked before (268 distinct), and mem0 embeds every one.
With the cache, Mnemo would skip the embedding of each repeat and the search p50 would
be flattered, not measured.

It then prints, per setting, Mnemo ÷ each mem0 target (p50 of add and search, hits,
recall) and the time until the last add is searchable, beside the issue's targets
(add and search p50 ≤ 0.5× ``mem0_iter_http`` with equal or more hits). The harness's
own JSON is kept per setting in ``--out-dir``; a summary goes to ``peers.json``.

Set up the mem0 venv first (``../shared/peers/mem0/setup.sh``; pass its Python with
``--mem0-python``). The mem0 HTTP wrapper uses the uvicorn implementation installed in
that venv: install ``uvloop`` and ``httptools`` there too, so that both sides pay the
same transport (the summary records which one the wrapper used).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench._service import REPO_ROOT, running_service


def find_harness() -> Path:
    """``../shared/peers/compare_mem0.py`` seen from the checkout (or from a folder
    above it: a git worktree sits one level deeper)."""
    for parent in REPO_ROOT.parents:
        candidate = parent / "shared" / "peers" / "compare_mem0.py"
        if candidate.exists():
            return candidate
    return REPO_ROOT.parent / "shared" / "peers" / "compare_mem0.py"


DEFAULT_MEM0_PYTHON = "/tmp/mem0_probe/venv/bin/python"
PEER = "mem0_iter_http"  # the yardstick: mem0 behind HTTP, full result lists
TARGET_RATIO = 0.5


@contextlib.contextmanager
def fake_embedder(python: str, fake: Path, workdir: Path) -> Iterator[tuple[str, int]]:
    """A second ``fake_openai.py`` for Mnemo alone: (its /v1 URL, its pid)."""
    port_file = workdir / "mnemo-fake.port"
    proc = subprocess.Popen(
        [python, str(fake), "--port", "0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("fake_openai.py did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}/v1", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_setting(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out = args.out_dir / f"compare-{name}.json"
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        extra_pids: list[int] = []
        if name == "fake":
            url, pid = stack.enter_context(
                fake_embedder(
                    args.mem0_python, args.harness.parent / "mem0" / "fake_openai.py", workdir
                )
            )
            env = {
                "MNEMO_EMBEDDER": "openai",
                "MNEMO_EMBEDDING_BASE_URL": url,
                "MNEMO_EMBEDDING_MODEL": "fake-hash-embed",
                "MNEMO_EMBEDDING_API_KEY": "sk-fake-local",
            }
            extra_pids.append(pid)
        if args.in_process_worker:
            env["MNEMO_WORKER_PROCESS"] = "false"
        if not args.query_cache:
            env["MNEMO_QUERY_CACHE_SIZE"] = "0"
        service = stack.enter_context(running_service(extra_env=env, workers=args.workers))
        print(f"[{name}] mnemo serve ready at {service.base_url}", file=sys.stderr)
        cmd = [
            args.mem0_python,
            str(args.harness),
            "--mnemo-url",
            service.base_url,
            "--mnemo-data-dir",
            str(service.data_dir),
            "--targets",
            args.targets,
            "--workdir",
            str(workdir / f"harness-{name}"),
            "--pgdata",
            str(workdir / "mem0-pgdata"),
            "--out",
            str(out),
            *(arg for pid in [service.pid, *extra_pids] for arg in ("--mnemo-pid", str(pid))),
            *args.harness_args,
        ]
        print(" ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, timeout=args.timeout)
    return dict(json.loads(out.read_text()))


def ratios(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Mnemo ÷ each mem0 target, for the figures the issue judges."""
    targets = result["targets"]
    mnemo = targets["mnemo"]
    out: dict[str, dict[str, float | None]] = {}
    for name, peer in targets.items():
        if name == "mnemo":
            continue
        out[name] = {
            "add_p50": _ratio(mnemo["add"]["p50_ms"], peer["add"]["p50_ms"]),
            "search_p50": _ratio(mnemo["search"]["p50_ms"], peer["search"]["p50_ms"]),
            "hits": _ratio(mnemo["search"]["mean_hits"], peer["search"]["mean_hits"]),
            "recall": _ratio(
                mnemo["search"]["target_recall_at_k"], peer["search"]["target_recall_at_k"]
            ),
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def summarise(name: str, result: dict[str, Any]) -> dict[str, Any]:
    targets = result["targets"]
    figures = {
        t: {
            "add_p50_ms": r["add"]["p50_ms"],
            "add_p99_ms": r["add"]["p99_ms"],
            "search_p50_ms": r["search"]["p50_ms"],
            "search_p99_ms": r["search"]["p99_ms"],
            "mean_hits": r["search"]["mean_hits"],
            "recall_at_k": r["search"]["target_recall_at_k"],
            "healthz_p50_ms": (r.get("healthz") or {}).get("p50_ms"),
            "transport": r.get("transport"),
        }
        for t, r in targets.items()
    }
    searchable = targets["mnemo"]["add"]["searchable"]
    rat = ratios(result)
    peer = rat.get(PEER)
    met = None
    if peer is not None:
        met = {
            "add_p50": (peer["add_p50"] or 99) <= TARGET_RATIO,
            "search_p50": (peer["search_p50"] or 99) <= TARGET_RATIO,
            "hits": (peer["hits"] or 0) >= 1.0,
        }
    return {
        "embedder": name,
        "figures": figures,
        "ratios": rat,
        "mnemo_searchable": searchable,
        "meets_target_vs_" + PEER: met,
        "loadavg": result["run"]["host"],
    }


def print_summary(summary: dict[str, Any]) -> None:
    name = summary["embedder"]
    cache = "on" if summary.get("query_cache") else "off"
    print(f"\nMnemo beside mem0 — embedder setting: {name}, Mnemo's query cache {cache}")
    print(
        f"{'target':<16}{'add p50':>9}{'add p99':>9}{'srch p50':>9}{'srch p99':>9}{'hits':>7}"
        f"{'recall':>8}{'healthz':>9}  transport"
    )
    for t, f in summary["figures"].items():
        print(
            f"{t:<16}{f['add_p50_ms']:>9.2f}{f['add_p99_ms']:>9.2f}{f['search_p50_ms']:>9.2f}"
            f"{f['search_p99_ms']:>9.2f}{f['mean_hits']:>7.2f}{f['recall_at_k']:>8.3f}"
            f"{(f['healthz_p50_ms'] or float('nan')):>9.2f}  {f['transport'] or '-'}"
        )
    for t, r in summary["ratios"].items():
        print(
            f"  mnemo/{t:<15} add p50 ×{r['add_p50']}  search p50 ×{r['search_p50']}"
            f"  hits ×{r['hits']}  recall ×{r['recall']}"
        )
    s = summary["mnemo_searchable"]
    print(
        f"  mnemo: last add searchable after {s['time_to_searchable_s']} s"
        f" ({s['sample_found']}/{s['sample_size']} earlier adds found)"
    )
    met = summary["meets_target_vs_" + PEER]
    if met is not None:
        print(
            "  target (≤ 0.5× mem0_iter_http, hits ≥): "
            + ", ".join(f"{k} {'ok' if v else 'MISS'}" for k, v in met.items())
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--embedders", default="default,fake", help="default, fake, or both")
    parser.add_argument(
        "--mem0-python",
        default=os.environ.get("MEM0_PY", DEFAULT_MEM0_PYTHON),
        help="the mem0 venv's python (../shared/peers/mem0/setup.sh)",
    )
    parser.add_argument("--harness", type=Path, default=find_harness())
    parser.add_argument("--targets", default=f"mem0_http,{PEER},mnemo")
    parser.add_argument("--workers", type=int, default=1, help="`mnemo serve --workers N`")
    parser.add_argument(
        "--in-process-worker",
        action="store_true",
        help="MNEMO_WORKER_PROCESS=false: the job worker inside the API process",
    )
    parser.add_argument(
        "--query-cache",
        action="store_true",
        help="keep Mnemo's query-vector cache on (flatters the search: the harness repeats"
        " its questions)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per harness run")
    parser.add_argument("harness_args", nargs="*", help="after --: passed to the harness")
    args = parser.parse_args(argv)
    settings = [s.strip() for s in args.embedders.split(",") if s.strip()]
    if not settings or any(s not in ("default", "fake") for s in settings):
        parser.error("--embedders: default, fake, or default,fake")
    args.settings = settings
    if not Path(args.mem0_python).exists():
        parser.error(f"{args.mem0_python} not found: run ../shared/peers/mem0/setup.sh first")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="mnemo-peers-") as tmp:
        # Running as root, the harness's Postgres runs as another user, which must be
        # able to reach its data directory below this one.
        Path(tmp).chmod(0o755)
        for name in args.settings:
            summary = summarise(name, run_setting(name, args, Path(tmp)))
            summaries.append(
                summary
                | {"worker_process": not args.in_process_worker, "query_cache": args.query_cache}
            )
    (args.out_dir / "peers.json").write_text(json.dumps(summaries, indent=2) + "\n")
    for summary in summaries:
        print_summary(summary)
    print(f"wrote {args.out_dir / 'peers.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
