"""Context tokens per turn of every session, Mnemo beside the baselines (PNG)."""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.recall.driver import CHECKPOINT_EVERY


def plot(result: Mapping[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install '.[bench]')", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, c in enumerate(result["cases"]):
        xs = [cp["turn"] for cp in c["checkpoints"]]
        kw: dict[str, Any] = {"linewidth": 0.8, "alpha": 0.45}
        ax.plot(
            xs,
            [cp["full_history_tokens"] for cp in c["checkpoints"]],
            color="tab:red",
            linestyle="--",
            label="full history" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["truncation_tokens"] for cp in c["checkpoints"]],
            color="tab:gray",
            linestyle=":",
            label="truncation" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["context_tokens"] for cp in c["checkpoints"]],
            color="tab:blue",
            label="Mnemo context" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["state_tokens"] for cp in c["checkpoints"]],
            color="tab:green",
            linewidth=0.8,
            alpha=0.6,
            label="Mnemo task-state block" if i == 0 else None,
        )
    # Bold: the mean over the sessions still running at each checkpoint.
    series = (
        ("full_history_tokens", "tab:red", "--"),
        ("truncation_tokens", "tab:gray", ":"),
        ("context_tokens", "tab:blue", "-"),
        ("state_tokens", "tab:green", "-"),
    )
    for key, color, style in series:
        by_turn: dict[int, list[int]] = defaultdict(list)
        for c in result["cases"]:
            for cp in c["checkpoints"]:
                by_turn[cp["turn"] // CHECKPOINT_EVERY * CHECKPOINT_EVERY].append(cp[key])
        xs = sorted(t for t, v in by_turn.items() if len(v) >= 2)
        ax.plot(
            xs,
            [statistics.fmean(by_turn[t]) for t in xs],
            color=color,
            linestyle=style,
            linewidth=2.6,
        )
    budget = result["parameters"]["budget"]
    ax.axhline(budget, color="black", linewidth=0.8, label=f"budget {budget}")
    ax.set_yscale("log")
    ax.set_xlabel("turns posted")
    ax.set_ylabel("tokens (log scale)")
    ax.set_title(
        f"Context tokens per turn, {len(result['cases'])} sessions (bold: mean of sessions)"
    )
    ax.legend(loc="upper left")
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
