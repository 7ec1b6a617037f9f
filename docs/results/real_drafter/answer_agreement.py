"""How well the retrained drafter fits its own training samples: depth-1/2 top-1 agreement with the target and
T = 1 acceptance (1 - TV), over all positions (what train/drafter.py's loss and metrics count) and over the answer
tokens alone (the only ones it ever drafts). 16 samples spread over the 2,093, one thread; the target in bf16 and
the drafter in float32 on float32 features, as train/drafter.py trains it (its `teacher`).

    .venv/bin/python docs/results/real_drafter/answer_agreement.py [RUN_DIR]
"""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from specdec import models  # noqa: E402
from specdec.feature_drafter import head_weights, load_drafter, unrolled_features  # noqa: E402
from train.drafter import teacher  # noqa: E402

RUN = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/real/drafter_mbpp_2k")


def main() -> None:
    torch.set_num_threads(1)
    seqs = json.loads((RUN / "samples.json").read_text())["sequences"][::131][:16]
    model, tok = models.load_model("artifacts/models/qwen25coder_15b", device="cpu", dtype="bfloat16")
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)  # opens the answer in Qwen's template
    net, _ = load_drafter(RUN / "drafter", model)
    net = net.float().eval()
    hw, hb = head_weights(net, model)
    hw, hb = hw.float(), hb.float() if hb is not None else None
    embed, d2t = model.get_input_embeddings(), net.draft_to_target
    sums = {k: [[0.0, 0.0, 0] for _ in range(2)] for k in ("all", "answer")}
    with torch.no_grad():
        for s in seqs:
            t = torch.tensor([s])
            hidden, logp = teacher(model, t, torch.ones_like(t, dtype=torch.bool))
            p = logp.exp()[0]
            k = len(header)
            start = max(i for i in range(len(s) - k + 1) if s[i:i + k] == header) + k
            for depth, f in enumerate(unrolled_features(net, embed(t).to(hidden.dtype), hidden, 2)):
                q = torch.zeros_like(p)
                q[:, d2t] = torch.softmax(F.linear(f, hw, hb).float(), -1)[0]
                accept = torch.minimum(p, q).sum(-1)
                top1 = (q.argmax(-1) == p.argmax(-1)).float()
                # position j predicts token j+1: the answer's first token is predicted at start - 1
                for name, lo in (("all", depth), ("answer", max(start - 1, depth))):
                    r = sums[name][depth]
                    r[0] += float(top1[lo:].sum())
                    r[1] += float(accept[lo:].sum())
                    r[2] += len(s) - lo
    for name, rows in sums.items():
        print(name, "; ".join(f"depth {d + 1}: top-1 {a / n:.3f}, acceptance (T=1) {b / n:.3f}, {n} positions"
                              for d, (a, b, n) in enumerate(rows)))


if __name__ == "__main__":
    main()
