"""Decode one prompt, or a file of requests, with a chosen proposer and verification rule (specdec.api).

    python -m specdec --prompt "Question: Tom has 3 apples..." --rule static --w 0.5 --gamma 5
    python -m specdec --head outputs/train/.../export            # decode with a trained ensemble head
    python -m specdec --target meta-llama/Llama-3.1-8B-Instruct --draft meta-llama/Llama-3.2-1B-Instruct \\
        --device cuda --dtype bfloat16 --prompt "..."
    python -m specdec --prompts-file in.jsonl --out out.jsonl --head <run dir>/head --batch-size 16

A prompts file holds one JSON object per line: {"prompt": "...", "id": any (copied), "max_new_tokens": int,
"temperature": float, "gamma": int, "seed": int} (all but "prompt" optional; the command line gives the
defaults). The output has one JSON object per input line, in input order: {"line", "id", "prompt", "text",
"token_ids", "finish_reason", "stats"}, or {"line", "error"} for a line that cannot be decoded (invalid JSON, no
prompt, an empty prompt, a bad setting); the other lines are still decoded. Requests with equal settings are
decoded together in batches of --batch-size (the output of a sampled request depends on its seed and its batch).
Finished batches are appended to <out>.partial; --resume skips the lines already there. The partial file starts
with the run's identity (models, rule, head weights, default settings, batch size): --resume refuses a partial
file decoded otherwise, and decodes again any line whose text changed since.

Without --target/--draft it uses the embedded tiny trio (once built: `make models`, or any training or evaluation
job, builds it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

from tqdm.auto import tqdm

from specdec.api import SpeculativeGenerator
from specdec.jsonl import rewrite_jsonl, settings_diff, split_lines
from specdec.proposers import drafter_sha256

SETTINGS = {"max_new_tokens": int, "temperature": float, "gamma": int, "seed": int}
FIELDS = {"prompt", "id", *SETTINGS}


def parse_request(line: str, defaults: dict) -> dict:
    """One line of a prompts file → {"prompt", "id", **settings}, or ValueError naming what is wrong."""
    if not line.strip():
        raise ValueError("empty line: expected a JSON object with a \"prompt\" field")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object with a \"prompt\" field, got {type(obj).__name__}")
    if "prompt" not in obj:
        raise ValueError(f"missing field \"prompt\" (fields given: {sorted(obj)})")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; allowed: {sorted(FIELDS)}")
    if not isinstance(obj["prompt"], str):
        raise ValueError(f"\"prompt\" must be a string, got {type(obj['prompt']).__name__}")
    if not obj["prompt"].strip():
        raise ValueError("the prompt is empty")
    req = {"prompt": obj["prompt"], "id": obj.get("id")}
    for key, kind in SETTINGS.items():
        value = obj.get(key, defaults[key])
        # NaN and ±Infinity are valid JSON numbers here (json.loads accepts them) but no valid setting
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or (kind is int and value != int(value))):
            raise ValueError(f"\"{key}\" must be {'an integer' if kind is int else 'a finite number'}, got {value!r}")
        req[key] = kind(value)
    if req["max_new_tokens"] < 1:
        raise ValueError(f"\"max_new_tokens\" must be >= 1, got {req['max_new_tokens']}")
    if req["temperature"] < 0:
        raise ValueError(f"\"temperature\" must be >= 0, got {req['temperature']}")
    return req


def run_identity(sg: SpeculativeGenerator, defaults: dict, batch_size: int) -> dict:
    """What a file's outputs depend on besides its lines (a sampled request's output depends on its batch too)."""
    return {"method": sg.label, "models": sg.models.names(), "device": str(sg.models.device),
            "dtype": str(sg.models.dtype), "params": sg.spec.params,
            "head_sha256": (sg.spec.head_meta or {}).get("weights_sha256"),
            "model_fingerprints": sg.models.fingerprints(),  # a model rebuilt at the same path is another model
            "drafter_sha256": drafter_sha256(sg.spec.proposer),
            "defaults": defaults, "batch_size": batch_size}


IDENTITY_ADDED_LATER = ("model_fingerprints", "drafter_sha256")  # partial files written before it: not compared


def line_sha(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8")).hexdigest()[:16]


def run_file(sg: SpeculativeGenerator, prompts_file: Path, out: Path, defaults: dict, batch_size: int,
             resume: bool = False) -> dict[str, int]:
    """Decode every line of prompts_file into out (one record per line, input order); returns counts."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    lines = split_lines(prompts_file.read_text(encoding="utf-8"))
    partial = out.with_name(out.name + ".partial")
    header = {"resume_identity": json.loads(json.dumps(run_identity(sg, defaults, batch_size)))}
    done: dict[int, dict] = {}
    if resume and partial.exists():
        raw_lines = split_lines(partial.read_text(encoding="utf-8"))
        try:
            found = json.loads(raw_lines[0]) if raw_lines else header
        except json.JSONDecodeError:
            found = None
        theirs = found.get("resume_identity") if isinstance(found, dict) else None
        diff = (settings_diff(theirs, header["resume_identity"], optional=IDENTITY_ADDED_LATER)
                if isinstance(theirs, dict) else ["no identity record"])
        if diff:
            raise ValueError(f"cannot resume {partial}: it was decoded with other settings ({'; '.join(diff)}); "
                             f"rerun with the same settings, or without --resume to start over")
        for raw in raw_lines[1:]:
            try:
                rec = json.loads(raw)
                i = int(rec["line"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a torn last line from an interrupted run: decoded again
            if 1 <= i <= len(lines) and rec.get("line_sha") == line_sha(lines[i - 1]):  # else: the line changed
                done[i] = rec
    elif partial.exists():
        partial.unlink()
    # the identity first, then the kept records (without a torn line, so that appends start on a fresh line)
    rewrite_jsonl(partial, [header, *done.values()], ensure_ascii=False)  # atomic: a kill here loses no record
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    bar = tqdm(total=len(lines), initial=len(done), desc="requests", unit="req")
    with open(partial, "a", encoding="utf-8") as sink:
        def emit(rec: dict) -> None:
            rec["line_sha"] = line_sha(lines[rec["line"] - 1])
            done[rec["line"]] = rec
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            sink.flush()
            bar.update(1)

        for i, line in enumerate(lines, start=1):
            if i in done:
                continue
            try:
                req = parse_request(line, defaults)
                sg.encode(req["prompt"], req["gamma"] if sg.gamma else 0)  # too long etc.: this line only
            except (ValueError, TypeError) as e:
                emit({"line": i, "error": str(e)})
                continue
            key = tuple(req[k] for k in SETTINGS)
            groups.setdefault(key, []).append((i, req))
        for reqs in groups.values():
            for start in range(0, len(reqs), batch_size):
                chunk = reqs[start:start + batch_size]
                s = chunk[0][1]
                try:
                    comps = sg.generate([r["prompt"] for _, r in chunk], max_new_tokens=s["max_new_tokens"],
                                        temperature=s["temperature"], gamma=s["gamma"] if sg.gamma else None,
                                        seed=s["seed"])
                except (ValueError, TypeError) as e:
                    for i, _ in chunk:
                        emit({"line": i, "error": str(e)})
                    continue
                for (i, r), c in zip(chunk, comps):
                    emit({"line": i, "id": r["id"], "prompt": c.prompt, "text": c.text, "token_ids": c.token_ids,
                          "finish_reason": c.finish_reason, "stats": c.stats})
    bar.close()
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(1, len(lines) + 1):
            f.write(json.dumps({k: v for k, v in done[i].items() if k != "line_sha"}, ensure_ascii=False) + "\n")
    tmp.replace(out)
    partial.unlink()
    errors = sum("error" in r for r in done.values())
    return {"lines": len(lines), "ok": len(lines) - errors, "errors": errors}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specdec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", help="target model dir or hub id (default: embedded tiny target)")
    ap.add_argument("--draft", help="draft model dir or hub id (default: embedded tiny draft)")
    ap.add_argument("--amateur", help="amateur model dir or hub id, for the contrastive rules")
    ap.add_argument("--models-dir", help="a trio directory <dir>/{tokenizer,target,draft,amateur}")
    ap.add_argument("--prompt", default="Question: Mia has 12 pens and buys 7 more. How many pens does she have?\n"
                                        "Answer (end with #### <number>):\n")
    ap.add_argument("--prompts-file", type=Path, help="JSONL requests (see above); needs --out")
    ap.add_argument("--out", type=Path, help="JSONL output for --prompts-file")
    ap.add_argument("--batch-size", type=int, default=8, help="requests decoded together (--prompts-file)")
    ap.add_argument("--resume", action="store_true", help="keep the lines already in <out>.partial")
    ap.add_argument("--proposer", choices=["draft", "ngram", "none"], default="draft")
    ap.add_argument("--rule", default=None,
                    help="exact|sd, static, lossy, cascade, fsd, typical, fly, cd, dcd, dcd_ngram, scd, ar_target, "
                         "ar_draft (default exact, or the head with --head)")
    ap.add_argument("--head", help="exported ensemble head dir (head.safetensors + config.json): rule = the head")
    ap.add_argument("--w", type=float, default=0.5, help="static ensemble weight on the target")
    ap.add_argument("--lenience", type=float, default=0.5, help="lossy rule lenience l")
    ap.add_argument("--threshold", type=float, default=0.1,
                    help="cascade deferral threshold; fsd divergence threshold (nats for kl/js)")
    ap.add_argument("--divergence", choices=["kl", "js", "tv"], default="kl", help="fsd divergence")
    ap.add_argument("--epsilon", type=float, default=0.3, help="typical acceptance epsilon (delta = sqrt(epsilon))")
    ap.add_argument("--bonus", choices=["p", "nu"], default=None,
                    help="fsd, typical, cascade: the bonus token from p or from the rule's nu (the nu-form); default "
                         "the rule's own: p for fsd and typical (the papers), nu for cascade")
    ap.add_argument("--entropy-threshold", type=float, default=0.3, help="fly entropy gate (nats)")
    ap.add_argument("--window", type=int, default=2, help="fly deferred window (drafts)")
    ap.add_argument("--alpha", type=float, default=0.5, help="contrastive rules: amateur penalty")
    ap.add_argument("--beta", type=float, default=0.1, help="contrastive rules: plausibility cut-off")
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the models' forward")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    # Settings checked before any model loads, so a typo costs no load time and gives no traceback.
    for flag, value, least in (("--batch-size", args.batch_size, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                               ("--gamma", args.gamma, 0)):
        if value < least:
            ap.error(f"{flag} must be >= {least}, got {value}")
    if not args.temperature >= 0:
        ap.error(f"--temperature must be >= 0 (0 is greedy), got {args.temperature}")
    if args.prompts_file is not None and args.out is None:
        ap.error("--prompts-file needs --out")
    if args.prompts_file is not None and not args.prompts_file.is_file():
        ap.error(f"--prompts-file {args.prompts_file} does not exist")
    if args.prompts_file is not None:
        out = args.out.resolve()
        if args.prompts_file.resolve() in (out, out.with_name(out.name + ".partial")):
            ap.error(f"--out {args.out} would overwrite the prompts file {args.prompts_file}: write elsewhere")

    rule = args.rule
    if args.proposer == "none":
        if rule not in (None, "exact", "sd", "ar_target"):
            ap.error(f"--proposer none decodes with the target alone; --rule {rule} needs a proposer")
        rule = "ar_target"
    try:
        sg = SpeculativeGenerator.from_pretrained(
            args.target, args.draft, head=args.head, rule=rule, amateur=args.amateur, models_dir=args.models_dir,
            device=args.device, dtype=args.dtype, gamma=args.gamma,
            proposer="draft" if args.proposer == "none" else args.proposer, w=args.w, lenience=args.lenience,
            threshold=args.threshold, alpha=args.alpha, beta=args.beta, compile=args.compile,
            divergence=args.divergence, epsilon=args.epsilon, entropy_threshold=args.entropy_threshold,
            window=args.window, **({} if args.bonus is None else {"bonus": args.bonus}))
    except (ValueError, FileNotFoundError, OSError) as e:
        sys.exit(f"error: {e}")

    if args.prompts_file is not None:
        defaults = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                    "gamma": args.gamma, "seed": args.seed}
        counts = run_file(sg, args.prompts_file, args.out, defaults, args.batch_size, resume=args.resume)
        print(f"{counts['ok']} of {counts['lines']} requests decoded ({counts['errors']} errors) with "
              f"{sg.label} → {args.out}")
        return

    try:
        (c,) = sg.generate([args.prompt], max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                           gamma=args.gamma if sg.gamma else None, seed=args.seed, progress=True)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(args.prompt + c.text)
    s = c.stats
    acc = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.3f}"
    print(f"\n--- {sg.label}, γ={s['gamma']}, T={args.temperature}")
    print(f"new tokens {s['new_tokens']} in {s['rounds']} rounds ({s['tokens_per_round']:.2f} tokens/round), "
          f"acceptance rate {acc}, {s['tokens_per_s']:.1f} tokens/s")


if __name__ == "__main__":
    main()
