"""PNG figures of a dataset run (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

SYSTEM_LABELS = {
    "mnemo": "Mnemo (episodes, hybrid)",
    "bm25": "BM25 raw turns",
    "dense": "dense raw turns",
}
COLORS = {"mnemo": "#1f77b4", "bm25": "#ff7f0e", "dense": "#2ca02c"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def recall_by_category(result: Mapping[str, Any], path: Path, title: str) -> None:
    """Session recall@5 and turn recall@10 per category, Mnemo vs the baselines."""
    plt = _pyplot()
    summary = result["summary"]
    names = result["category_names"]
    ks = result["parameters"]["k"]
    metrics = [
        (f"session_r@{5 if 5 in ks else ks[0]}", f"session recall@{5 if 5 in ks else ks[0]}"),
        (f"turn_r@{max(ks)}", f"turn recall@{max(ks)}"),
    ]
    cats = list(summary["mnemo"].keys())
    systems = [s for s in ("mnemo", "bm25", "dense") if s in summary]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    width = 0.8 / len(systems)
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for j, system in enumerate(systems):
            values = [summary[system][c].get(metric) or 0.0 for c in cats]
            xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(cats))]
            ax.bar(xs, values, width, label=SYSTEM_LABELS[system], color=COLORS[system])
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(
            [f"{c}\n{names[c]}" if c in names and names[c] != c else c for c in cats],
            fontsize=7,
            rotation=30,
            ha="right",
        )
        ax.set_ylim(0, 1.05)
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("mean recall over questions")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(systems), fontsize=8)
    machine = result["machine"]
    fig.suptitle(
        f"{title} — {result['parameters']['data'].split('/')[-1]}, {machine['date'][:10]}",
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tokens_vs_history(result: Mapping[str, Any], path: Path, title: str) -> None:
    """Mnemo's context tokens per question against the user's whole history."""
    plt = _pyplot()
    history = result["history_tokens"]
    xs, ys = [], []
    for record in result["questions"]:
        if record.get("user_id") not in history or "mnemo" not in record:
            continue
        xs.append(history[record["user_id"]])
        ys.append(record["mnemo"]["context_tokens"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.scatter(xs, ys, s=10, alpha=0.5, label="Mnemo context (per question)")
    if xs:
        ax.plot([min(xs), max(xs)], [min(xs), max(xs)], "--", color="grey", label="whole history")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("user's history (tokens, cl100k)")
    ax.set_ylabel("context tokens")
    ax.set_title(f"{title}: context vs history")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
