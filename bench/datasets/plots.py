"""PNG figures of a dataset run (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

SYSTEM_LABELS = {
    "mnemo": "Mnemo GET /context",
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
        (
            f"episodes_session_r@{5 if 5 in ks else ks[0]}",
            f"episode search: session recall@{5 if 5 in ks else ks[0]}",
        ),
        (f"episodes_turn_r@{max(ks)}", f"episode search: turn recall@{max(ks)}"),
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


def recall_vs_tokens(result: Mapping[str, Any], path: Path, title: str, group: str) -> None:
    """Evidence present in the context against the tokens it used, one line per system."""
    plt = _pyplot()
    summary = result["summary"]
    budgets = result["parameters"]["budgets"]
    groups = list(dict.fromkeys([group, "all"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(6.2 * len(groups), 4.4), sharey=True)
    axes = axes if len(groups) > 1 else [axes]
    for ax, name in zip(axes, groups, strict=True):
        for system in ("mnemo", "bm25", "dense"):
            figures = summary.get(system, {}).get(name)
            if not figures:
                continue
            xs = [figures.get(f"tok@{b}") or 0.0 for b in budgets]
            ys = [figures.get(f"ev@{b}") or 0.0 for b in budgets]
            ax.plot(xs, ys, "o-", label=SYSTEM_LABELS[system], color=COLORS[system])
            for b, x, y in zip(budgets, xs, ys, strict=True):
                ax.annotate(f"{b}", (x, y), fontsize=7, xytext=(3, -10), textcoords="offset points")
        n = summary["mnemo"][name]["n"]
        ax.set_title(f"{name} ({n} questions)")
        ax.set_xlabel("context tokens used (mean; labels: budget)")
        ax.set_ylim(0, 1.0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("evidence turns present in the context")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"{title} — {result['parameters']['data'].split('/')[-1]}"
        f" ({result['parameters']['split']}), {result['machine']['date'][:10]}",
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
