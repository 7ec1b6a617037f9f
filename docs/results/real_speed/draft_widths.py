"""One draft step of the dynamic slim 0.5B at 1, 2 and 3 tokens per call (per-row kernel, <= KERNEL_ROWS rows), and
at 2 tokens through the int8-matmul path, probed in turn (bench.gpu.step_costs), against the 1.5B's step."""
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, ".")
from bench.gpu import make_slim_draft, step_costs  # noqa: E402
from specdec import slim_draft as sdm  # noqa: E402
from specdec.models import LM, load_model  # noqa: E402

torch.set_num_threads(1)
M = "artifacts/models"  # run from the repository root: .venv/bin/python docs/results/real_speed/<this file>
args = SimpleNamespace(random_pair=None, draft=f"{M}/qwen25coder_05b", task="mbpp",
                       data_path="../shared/data/mbpp/sanitized-mbpp.json", draft_vocab=32768, draft_int8="dynamic",
                       n_prompts=4, data_seed=11)
model, tok = load_model(f"{M}/qwen25coder_05b", device=torch.device("cpu"), dtype=torch.bfloat16)[:2]
pair = SimpleNamespace(tokenizer=tok)
slim = make_slim_draft(args, torch.device("cpu"), torch.bfloat16, pair)
target = LM(load_model(f"{M}/qwen25coder_15b", device=torch.device("cpu"), dtype=torch.bfloat16)[0], name="target")
prompt = [tok.encode("def add(a, b):\n    return a + b\n\n# a function that returns the largest of three numbers\n")]
c = step_costs({"target_1": (target, 1), "slim_1": (slim, 1), "slim_2": (slim, 2), "slim_3": (slim, 3)}, prompt, 20)
sdm.KERNEL_ROWS = 1  # 2 and 3 rows through the int8 x int8 matmul instead
c2 = step_costs({"target_1": (target, 1), "slim_1": (slim, 1), "slim_2_intmm": (slim, 2),
                 "slim_3_intmm": (slim, 3)}, prompt, 20)
for d in (c, c2):
    print({k: f"{1e3 * v:.1f} ms" for k, v in d.items()})
