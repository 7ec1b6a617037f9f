"""What a draft call of 1, 2 or 3 tokens costs the dynamic slim 0.5B (the per-row kernel up to KERNEL_ROWS rows,
then through the int8 matmul), against the 1.5B's step; and whether 2-token draft calls slow the 1.5B's next
5-token pass. Costs probed in turn (bench.gpu.step_costs). Run from the repository root:

    .venv/bin/python docs/results/real_speed/draft_widths.py
"""
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, ".")
from bench.gpu import make_slim_draft, step_costs  # noqa: E402
from specdec import slim_draft as sdm  # noqa: E402
from specdec.models import LM, load_model  # noqa: E402

torch.set_num_threads(1)
M = "artifacts/models"
args = SimpleNamespace(random_pair=None, draft=f"{M}/qwen25coder_05b", task="mbpp",
                       data_path="../shared/data/mbpp/sanitized-mbpp.json", draft_vocab=32768, draft_int8="dynamic",
                       n_prompts=4, data_seed=11)
tok = load_model(f"{M}/qwen25coder_05b", device=torch.device("cpu"), dtype=torch.bfloat16)[1]
slim = make_slim_draft(args, torch.device("cpu"), torch.bfloat16, SimpleNamespace(tokenizer=tok))
target = LM(load_model(f"{M}/qwen25coder_15b", device=torch.device("cpu"), dtype=torch.bfloat16)[0], name="target")
prompt = [tok.encode("def add(a, b):\n    return a + b\n\n# a function that returns the largest of three numbers\n")]


def show(label: str, costs: dict) -> None:
    print(label, {k: f"{1e3 * v:.1f} ms" for k, v in costs.items()}, flush=True)


# 1. one call at each width: the per-row kernel, then the int8 matmul at the same widths
show("kernel:", step_costs({"target_1": (target, 1), **{f"slim_{w}": (slim, w) for w in (1, 2, 3)}}, prompt, 20))
rows = sdm.KERNEL_ROWS
sdm.KERNEL_ROWS = 1  # 2 and 3 rows through the int8 x int8 matmul instead
show("int8 matmul:", step_costs({"target_1": (target, 1), **{f"slim_{w}": (slim, w) for w in (1, 2, 3)}}, prompt, 20))
sdm.KERNEL_ROWS = rows
# 2. the 1.5B's 5-token pass after four 1-token or four 2-token draft calls, alternating
for rep in range(3):
    for w in (1, 2):
        show(f"{rep} draft width {w}:",
             step_costs({"pass5": (target, 5), **{f"slim{i}_{w}": (slim, w) for i in range(4)}}, prompt, 12))
