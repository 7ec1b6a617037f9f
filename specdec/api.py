"""The inference API: load a target, a proposer and a verification rule (or a trained head) once, then decode
batches of text prompts.

    from specdec import SpeculativeGenerator
    sg = SpeculativeGenerator.from_pretrained(head="runs/train/<run>/head")          # embedded trio + a head
    sg = SpeculativeGenerator.from_pretrained(target="/models/llama-8b", draft="/models/llama-1b", rule="static",
                                              w=0.7, device="cuda", dtype="bfloat16")
    for c in sg.generate(["Question: ..."], max_new_tokens=128, temperature=1.0, seed=0):
        print(c.text, c.stats["acceptance_rate"], c.stats["tokens_per_s"])

Nothing here decodes or verifies by itself: the methods come from the registry, specdec/registry.py (the proposer
and rule objects evaluation builds; a head loads as method `diversed`, through `specdec.head.load_head`, which checks
its verification-rule version), and decoding is `specdec.generate.generate` with records=False, the loop training
rollouts run, minus their per-token records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.generate import generate
from specdec.head import check_head_tokenizer, read_head_config
from specdec.loading import Models
from specdec.models import encode_prompt
from specdec.registry import ALIASES, build_method, method_config  # ALIASES: friendly names of registry keys

DRAFTING = ("sd", "static", "lossy", "cascade", "diversed", "dcd", "ar_draft")  # methods that use the draft model
CONTRASTIVE = ("cd", "dcd", "dcd_ngram", "scd")  # methods that use the amateur


@dataclass
class Completion:
    prompt: str
    text: str  # the new text (special tokens skipped)
    token_ids: list[int]  # the new tokens (EOS included when generated)
    finish_reason: str  # "eos" | "length" | "context"
    stats: dict[str, Any] = field(default_factory=dict)
    accepted_per_round: list[int] = field(default_factory=list)  # drafts accepted in each round this row decoded


class SpeculativeGenerator:
    """A model pair (or trio) plus one decoding method, ready to decode text prompts."""

    def __init__(self, models: Models, method: str, spec: Any, compile: bool = False):
        self.models, self.method, self.spec, self.compile = models, method, spec, compile
        self.tokenizer = models.tokenizer
        self.target = spec.target or models.target
        self.gamma = spec.gamma
        lms = [self.target, spec.amateur, getattr(spec.proposer, "lm", None)]
        self.window = min(lm.max_positions for lm in lms if lm is not None)
        for lm in [*lms, spec.proposer]:
            if lm is not None and hasattr(lm, "sync_timing"):  # no device wait after each model call (the
                lm.sync_timing = False  # API reports no per-part time split); the feature drafter has one too

    @classmethod
    def from_pretrained(
        cls,
        target: str | Path | torch.nn.Module | None = None,
        draft: str | Path | torch.nn.Module | None = None,
        *,
        head: str | Path | None = None,
        rule: str | None = None,
        amateur: str | Path | torch.nn.Module | None = None,
        tokenizer: Any = None,
        models_dir: str | Path | None = None,
        device: str = "auto",
        dtype: str = "float32",
        gamma: int = 4,
        proposer: str = "draft",
        w: float = 0.5,
        lenience: float = 0.5,
        threshold: float = 0.1,
        alpha: float = 0.5,
        beta: float = 0.1,
        compile: bool = False,
        **options: Any,
    ) -> SpeculativeGenerator:
        """Load the models and build the method.

        target / draft / amateur: local model directories (Hugging Face format) or hub ids, every one the method
        uses; with none given, the embedded trio (or the trio directory `models_dir`; the default
        artifacts/models/tiny is built first when missing). device: auto | cpu | cuda[:i]; dtype: float32 |
        bfloat16 | float16. Each of target / draft / amateur may also be an already-loaded Hugging Face causal LM
        (e.g. `AutoModelForCausalLM.from_pretrained(...)`), used as it is, where it is; then pass its `tokenizer`
        (models loaded from paths here follow the first loaded model's device and dtype).
        head: an exported ensemble head (rule = the head). rule: a method of the registry by name — sd (exact),
        static (w), lossy (lenience), cascade (threshold, bonus), cd / dcd / dcd_ngram / scd (alpha, beta), ar_target,
        ar_draft, diversed (head), fsd (threshold, divergence, bonus), typical (epsilon, delta, bonus), fly
        (entropy_threshold, window) — default sd, or the head when one is given. proposer: draft | ngram.
        options: further method settings by name (those of conf/method/<rule>.yaml), e.g. epsilon=0.1.
        """
        name = ALIASES.get(rule, rule) if rule else ("diversed" if head else "sd")
        if head is not None and name != "diversed":
            raise ValueError(f"head={head} sets the rule to the head; drop rule={rule!r} (or drop head)")
        if name == "diversed" and head is None:
            raise ValueError("rule='head' needs head=PATH (an exported head: head.safetensors + config.json)")
        given = {"target": target, "draft": draft, "amateur": amateur}
        loaded = {r: m for r, m in given.items() if isinstance(m, torch.nn.Module)}
        if loaded and tokenizer is None:
            raise ValueError(f"{', '.join(loaded)} given as loaded models: pass their tokenizer=... as well")
        if loaded:  # models still to load from paths go where the loaded ones are
            p = next(next(iter(loaded.values())).parameters())
            device, dtype = str(p.device), str(p.dtype).removeprefix("torch.")
        explicit = any(v is not None for v in given.values())
        if models_dir is None and explicit:  # explicit models: every one the method uses must be given
            needs = ["target"] + (["draft"] if name in DRAFTING and proposer == "draft" else []) \
                + (["amateur"] if name in CONTRASTIVE else [])
            missing = [r for r in needs if given[r] is None]
            if missing:
                raise ValueError(f"rule {name!r} also needs {', '.join(f'{r}=PATH' for r in missing)} (or give no "
                                 f"model paths for the embedded trio, or models_dir=TRIO_DIR)")
        # No model given: the embedded trio (built first when missing).
        cfg = {"device": device, "dtype": dtype,
               **{k: (str(v) if v is not None and k not in loaded else None) for k, v in given.items()},
               "dir": None if models_dir is None else str(models_dir),
               "embedded": models_dir is None and not explicit}
        models = Models(cfg)
        for role in ("target", "draft", "amateur"):  # the target first: its tokenizer is the trio's
            if role in loaded:
                models.attach(role, loaded[role], tokenizer=tokenizer if role == "target" or "target" not in loaded
                              else None)
        method_cfg = method_config(name, head=head, alpha=alpha, beta=beta, gamma=gamma, proposer=proposer, w=w,
                                   lenience=lenience, threshold=threshold, **options)
        if head is not None:
            check_head_tokenizer(head, read_head_config(head), models.tokenizer)
        spec = build_method(name, models, method_cfg)
        if spec.generate_fn is not None:
            raise ValueError(f"method {name!r} decodes with its own loop, which this API does not serve; use "
                             f"eval/run.py method={name}")
        return cls(models, name, spec, compile=compile)

    @property
    def label(self) -> str:
        return self.spec.label

    def encode(self, prompt: str, gamma: int | None = None) -> list[int]:
        """Token ids of a prompt, or ValueError saying why it cannot be decoded."""
        if not isinstance(prompt, str):
            raise TypeError(f"a prompt must be a string, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        ids = encode_prompt(self.tokenizer, prompt)
        g = self.gamma if gamma is None else gamma
        if len(ids) + g + 1 > self.window:
            raise ValueError(f"the prompt has {len(ids)} tokens, too long for the context window of {self.window} "
                             f"positions (with γ+1={g + 1}); shorten it")
        return ids

    def generate(
        self,
        prompts: list[str] | str,
        *,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        gamma: int | None = None,
        seed: int = 0,
        progress: bool = False,
    ) -> list[Completion]:
        """Decode the prompts as one batch (temperature 0 = greedy). The result depends on the seed and on the
        batch (rows share one random stream). gamma: draft length (default: the method's)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        g = self.gamma if gamma is None else int(gamma)
        if self.gamma == 0 and g != 0:
            raise ValueError(f"method {self.method} drafts nothing: gamma does not apply (got {g})")
        if self.gamma > 0 and g < 1:
            raise ValueError(f"method {self.method} drafts tokens: gamma must be >= 1, got {g}")
        ids = [self.encode(p, g) for p in prompts]
        gen = torch.Generator(device=self.target.device).manual_seed(int(seed))
        out = generate(self.target, self.spec.proposer, ids, rule=self.spec.rule, gamma=g,
                       max_new_tokens=max_new_tokens, temperature=temperature,
                       eos_token_id=self.tokenizer.eos_token_id, amateur=self.spec.amateur, generator=gen,
                       records=False, compile=self.compile, progress=progress)
        seconds = out.stats["seconds"]
        total = out.stats["new_tokens"]
        done = []
        for b, prompt in enumerate(prompts):
            toks = out.tokens[b]
            active = out.rounds["active"][:, b]
            per_round = out.rounds["accepted"][:, b][active].tolist()
            rounds, accepted = len(per_round), sum(per_round)
            done.append(Completion(
                prompt=prompt, text=self.tokenizer.decode(toks, skip_special_tokens=True), token_ids=toks,
                finish_reason=out.finish_reason[b],
                stats={
                    "new_tokens": len(toks), "rounds": rounds, "drafted": rounds * g, "accepted": accepted,
                    "acceptance_rate": accepted / (rounds * g) if g and rounds else None,
                    "tokens_per_round": len(toks) / rounds if rounds else 0.0,
                    "seconds": seconds, "tokens_per_s": len(toks) / seconds if seconds > 0 else None,
                    "batch_size": len(prompts), "batch_tokens_per_s": total / seconds if seconds > 0 else None,
                    "method": self.label, "gamma": g, "temperature": temperature, "seed": int(seed),
                },
                accepted_per_round=per_round,
            ))
        return done
