"""The kept output vocabulary of a slim draft (specdec.slim_draft), ranked by token counts in a task's own text.

FR-Spec's point: a draft's head over the k most frequent ids costs k/V of the full head and loses only the mass of
the rest. Counting on the task's prompts and gold completions keeps more of the target's mass than the tokenizer's
merge order (real MBPP, the 1.5B's p on 30 held-out problems: 2.6% outside 32,768 counted ids, 5.4% outside the
first 32,768 ids). Count only rows disjoint from the evaluation (`--holdout`, as data.holdout), so the vocabulary
never saw the test problems.

    python data/draft_vocab.py --task mbpp --data-path ../shared/data/mbpp/sanitized-mbpp.json \\
        --tokenizer artifacts/models/qwen25coder_05b --holdout 64:11 64:13 --k 32768 --out artifacts/vocab/mbpp_32k.json
    python eval/run.py model=qwen25coder_15b_05b model.draft_int8=true model.draft_vocab=artifacts/vocab/mbpp_32k.json ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python data/draft_vocab.py`: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from data.loaders import load_examples
from data.tasks import get_task
from specdec.slim_draft import frequent_ids, special_ids, token_counts


def task_token_counts(task_name: str, path: str, tokenizer, vocab_size: int, holdout=None) -> tuple[torch.Tensor, str]:
    """Token counts over the task's formatted prompts and gold completions, in the rows left after `holdout`."""
    task = get_task(task_name)
    ex = load_examples(task, path=path, source="file", holdout=holdout)
    texts = (task.format_prompt(r, tokenizer) + task.target_text(r) for r in ex.rows)
    counts = token_counts((tokenizer(t)["input_ids"] for t in texts), vocab_size)
    return counts, f"{len(ex.rows)} rows of {ex.source}"


def write_vocab(out: Path, ids: torch.Tensor, vocab_size: int, source: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"k": int(ids.numel()), "vocab_size": vocab_size, "source": source,
                               "ids": ids.tolist()}) + "\n")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--data-path", required=True)
    ap.add_argument("--tokenizer", required=True, help="a model directory or GGUF model whose tokenizer to count with")
    ap.add_argument("--holdout", nargs="*", default=[], metavar="N:SEED",
                    help="drop the rows evaluations drawing N rows with data seed SEED use (data.holdout), in order")
    ap.add_argument("--k", type=int, required=True, help="ids to keep")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from specdec.models import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    vocab_size = len(tok)
    holdout = [{"n": int(h.split(":")[0]), "seed": int(h.split(":")[1])} for h in args.holdout] or None
    counts, source = task_token_counts(args.task, args.data_path, tok, vocab_size, holdout)
    ids = frequent_ids(args.k, vocab_size, counts, special_ids(tok))
    write_vocab(args.out, ids, vocab_size, f"counts over {source}")
    counted = int((counts > 0).sum())
    print(f"[draft_vocab] {args.k} ids of {vocab_size} ({counted} seen in {source}) -> {args.out}")
    return {"ids": ids, "counted": counted}


if __name__ == "__main__":
    main()
