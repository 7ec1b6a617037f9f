"""Decode one prompt with a chosen proposer and verification rule; print the text and acceptance statistics.

    python -m specdec --prompt "Question: Tom has 3 apples..." --rule static --w 0.5 --gamma 5
    python -m specdec --head outputs/train/.../export            # decode with a trained ensemble head
    python -m specdec --target meta-llama/Llama-3.1-8B-Instruct --draft meta-llama/Llama-3.2-1B-Instruct \\
        --device cuda --dtype bfloat16 --prompt "..."

Without --target/--draft it uses the embedded tiny trio (building it first if it is missing).
"""

from __future__ import annotations

import argparse

import torch

from specdec.generate import generate
from specdec.models import LM, check_tokenizers_match, load_model, resolve_device
from specdec.proposers import DraftModelProposer, NgramProposer
from specdec.targets import make_rule


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specdec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", help="target model dir or hub id (default: embedded tiny target)")
    ap.add_argument("--draft", help="draft model dir or hub id (default: embedded tiny draft)")
    ap.add_argument("--prompt", default="Question: Mia has 12 pens and buys 7 more. How many pens does she have?\n"
                                        "Answer (end with #### <number>):\n")
    ap.add_argument("--proposer", choices=["draft", "ngram", "none"], default="draft")
    ap.add_argument("--rule", choices=["exact", "static", "lossy", "cascade"], default="exact")
    ap.add_argument("--head", help="exported ensemble head dir (head.safetensors + config.json): rule = the head")
    ap.add_argument("--w", type=float, default=0.5, help="static ensemble weight on the target")
    ap.add_argument("--lenience", type=float, default=0.5, help="lossy rule lenience l")
    ap.add_argument("--threshold", type=float, default=0.1, help="cascade deferral threshold")
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    device = resolve_device(args.device)
    if args.target is None or (args.draft is None and args.proposer == "draft"):
        from data.build_models import ensure_embedded

        root = ensure_embedded()
        args.target = args.target or str(root / "target")
        args.draft = args.draft or str(root / "draft")
    target_model, tokenizer = load_model(args.target, device=device, dtype=args.dtype)
    target = LM(target_model, "target")
    proposer = None
    if args.proposer == "draft":
        draft_model, draft_tok = load_model(args.draft, device=device, dtype=args.dtype)
        check_tokenizers_match({"target": tokenizer, "draft": draft_tok})
        proposer = DraftModelProposer(LM(draft_model, "draft"))
    elif args.proposer == "ngram":
        proposer = NgramProposer(target.vocab_size, device=device)
    gamma = 0 if proposer is None else args.gamma
    kw = {"static": {"w": args.w}, "lossy": {"lenience": args.lenience}, "cascade": {"threshold": args.threshold}}
    rule = make_rule(args.rule, **kw.get(args.rule, {}))
    if args.head:
        from heads import load_head, tokenizer_hash

        if not isinstance(proposer, DraftModelProposer):
            ap.error("--head needs the draft-model proposer (the head reads the draft's hidden states)")
        head, meta = load_head(args.head, device=device, expect={
            "hidden_q": proposer.lm.hidden_size, "hidden_p": target.hidden_size,
            "tokenizer_hash": tokenizer_hash(tokenizer)})
        rule = make_rule("head", head=head)
        args.rule = f"head({args.head})"

    ids = tokenizer(args.prompt, add_special_tokens=True)["input_ids"]
    gen = torch.Generator(device=device).manual_seed(args.seed)
    out = generate(target, proposer, [ids], rule=rule, gamma=gamma, max_new_tokens=args.max_new_tokens,
                   temperature=args.temperature, eos_token_id=tokenizer.eos_token_id, generator=gen, progress=True)
    print(args.prompt + tokenizer.decode(out.tokens[0], skip_special_tokens=True))
    s = out.stats
    print(f"\n--- {args.proposer} proposer, rule={args.rule}, γ={gamma}, T={args.temperature}")
    print(f"new tokens {s['new_tokens']} in {s['rounds']} rounds ({s['new_tokens'] / max(s['rounds'], 1):.2f} "
          f"tokens/round), acceptance rate {out.acceptance_rate:.3f}, mean accepted length "
          f"{out.mean_accepted_length:.2f}, {s['new_tokens'] / s['seconds']:.1f} tokens/s "
          f"(target {s['time_target']:.2f}s, proposer {s['time_proposer']:.2f}s)")


if __name__ == "__main__":
    main()
