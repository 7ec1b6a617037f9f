"""Training curves of a run from its metrics.jsonl, for when W&B is offline or absent:

    python train/plot_metrics.py <run dir> [<run dir> ...] [--out curves.png]

One column per quantity (task reward, acceptance rate, the head's w with its 10-90% band), one line per run,
against the step; the default output is <first run dir>/curves.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.jsonl import read_jsonl  # noqa: E402

PANELS = (("task_reward", "task reward"), ("acceptance_rate", "acceptance rate"), ("w_mean", "head w (mean, q10-q90)"))


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for run_dir in run_dirs:
        path = Path(run_dir) / "metrics.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file (is {run_dir} a train/run.py run directory?)")
        rows = read_jsonl(path)
        steps = [r["step"] for r in rows]
        for ax, (key, _) in zip(axes, PANELS):
            line, = ax.plot(steps, [r.get(key) for r in rows], marker=".", label=Path(run_dir).name)
            if key == "w_mean" and all("w_q10" in r for r in rows):
                ax.fill_between(steps, [r["w_q10"] for r in rows], [r["w_q90"] for r in rows],
                                color=line.get_color(), alpha=0.2)
    for ax, (_, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = plot_runs(args.run_dirs, args.out or args.run_dirs[0] / "curves.png")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
