"""Does a 2-token call of the dynamic slim draft slow the 1.5B's next (γ+1)-pass? Probed in turn: the pass after
1-token draft calls vs after 2-token draft calls, three times each, alternating."""
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, ".")
from bench.gpu import make_slim_draft, step_costs  # noqa: E402
from specdec.models import LM, load_model  # noqa: E402

torch.set_num_threads(1)
M = "artifacts/models"  # run from the repository root: .venv/bin/python docs/results/real_speed/<this file>
args = SimpleNamespace(random_pair=None, draft=f"{M}/qwen25coder_05b", task="mbpp",
                       data_path="../shared/data/mbpp/sanitized-mbpp.json", draft_vocab=32768, draft_int8="dynamic",
                       n_prompts=4, data_seed=11)
tok = load_model(f"{M}/qwen25coder_05b", device=torch.device("cpu"), dtype=torch.bfloat16)[1]
slim = make_slim_draft(args, torch.device("cpu"), torch.bfloat16, SimpleNamespace(tokenizer=tok))
target = LM(load_model(f"{M}/qwen25coder_15b", device=torch.device("cpu"), dtype=torch.bfloat16)[0], name="target")
prompt = [tok.encode("def add(a, b):\n    return a + b\n\n# a function that returns the largest of three numbers\n")]
for rep in range(3):
    for w in (1, 2):
        calls = {"pass5": (target, 5), **{f"slim{i}_{w}": (slim, w) for i in range(4)}}
        c = step_costs(calls, prompt, 12)
        print(rep, f"draft width {w}:", {k: f"{1e3 * v:.1f}" for k, v in c.items()}, flush=True)
