"""The inference API and CLI: identical decoding to the training rollout path, head version check, batch CLI."""

import json
import os
import time

import pytest
import torch

from heads import EnsembleHead, HeadConfig, HeadFormatError, export_head, tokenizer_hash
from specdec import SpeculativeGenerator, generate
from specdec.__main__ import line_sha, run_file, run_identity
from specdec.__main__ import main as cli_main
from specdec.loading import Models
from specdec.proposers import DraftModelProposer
from specdec.targets import PAIR_FEATURES
from train.rollout import make_rule, rollout

PROMPTS = ["Question: Tom has 3 apples and buys 4 more.", "Q: 12 + 7 =", "Summarise: the cat sat on the mat."]
ENSEMBLE = {"kind": "ensemble"}


@pytest.fixture(scope="module")
def models(micro_trio):
    return Models({"dir": str(micro_trio), "device": "cpu"})


@pytest.fixture(scope="module")
def head_dir(models, tmp_path_factory):
    """An exported head whose w varies with its inputs (random output layer), so the rule really depends on it."""
    torch.manual_seed(0)
    head = EnsembleHead(HeadConfig(hidden_q=models.draft.hidden_size, hidden_p=models.target.hidden_size,
                                   num_features=len(PAIR_FEATURES), arch="mlp", init_w=0.6))
    torch.nn.init.normal_(head.out.weight, std=1.0)
    out = tmp_path_factory.mktemp("heads") / "head"
    return export_head(head, out, {"tokenizer_hash": tokenizer_hash(models.tokenizer), "target": ENSEMBLE})


def _loaded_head(path):
    from heads import load_head

    return load_head(path)[0]


def test_api_decodes_exactly_as_training_rollouts(models, head_dir, micro_trio):
    """Same models, head and seed: SpeculativeGenerator (records=False) emits the tokens and per-round accept
    counts of the training path (train.rollout's rule through generate with records), and rollout's own texts."""
    gamma, max_new, seed = 3, 24, 5
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, head=head_dir, gamma=gamma, device="cpu")
    comps = sg.generate(PROMPTS, max_new_tokens=max_new, temperature=1.0, seed=seed)
    ids = [sg.encode(p) for p in PROMPTS]

    head = _loaded_head(head_dir)
    train_out = generate(models.target, DraftModelProposer(models.draft), ids, rule=make_rule(head, ENSEMBLE),
                         gamma=gamma, max_new_tokens=max_new, temperature=1.0,
                         eos_token_id=models.tokenizer.eos_token_id,
                         generator=torch.Generator().manual_seed(seed), record_hidden=True)
    assert [c.token_ids for c in comps] == train_out.tokens
    for b, c in enumerate(comps):
        active = train_out.rounds["active"][:, b]
        assert c.accepted_per_round == train_out.rounds["accepted"][:, b][active].tolist()
    # The decoding is not trivial: drafts were both accepted and rejected, and the head's w varied.
    per_round = [k for c in comps for k in c.accepted_per_round]
    assert 0 < sum(per_round) < gamma * len(per_round)
    w = train_out.records["w"][train_out.records["token_mask"]]
    assert float(w.max() - w.min()) > 0.05

    batch = rollout(models, head, ids, target_cfg=ENSEMBLE, gamma=gamma, max_new_tokens=max_new, temperature=1.0,
                    generator=torch.Generator().manual_seed(seed))
    assert batch.texts == [c.text for c in comps]
    assert batch.stats["accepted"] == sum(per_round)


def test_records_false_is_the_same_loop_for_every_rule(models):
    """records=False changes what is kept, not what is decoded: tokens and accept counts match records=True."""
    ids = [models.tokenizer(p)["input_ids"] for p in PROMPTS]
    from specdec.targets import CascadeRule, ExactRule, StaticEnsembleRule

    for rule in (ExactRule(), StaticEnsembleRule(0.4), CascadeRule(0.1)):
        for temperature in (1.0, 0.0):
            outs = [generate(models.target, DraftModelProposer(models.draft), ids, rule=rule, gamma=4,
                             max_new_tokens=16, temperature=temperature, eos_token_id=models.tokenizer.eos_token_id,
                             generator=torch.Generator().manual_seed(1), records=rec) for rec in (True, False)]
            full, lean = outs
            assert full.tokens == lean.tokens
            assert torch.equal(full.rounds["accepted"].cpu(), lean.rounds["accepted"])
            assert torch.equal(full.records["token_mask"], lean.records["token_mask"])
            assert set(lean.records) == {"token_mask"}


def test_mismatched_verify_rule_version_is_refused(models, micro_trio, tmp_path):
    head = EnsembleHead(HeadConfig(hidden_q=models.draft.hidden_size, hidden_p=models.target.hidden_size,
                                   num_features=len(PAIR_FEATURES)))
    path = export_head(head, tmp_path / "old_head", {"verify_rule_version": 0})
    with pytest.raises(HeadFormatError, match="verification-rule version 0"):
        SpeculativeGenerator.from_pretrained(models_dir=micro_trio, head=path, device="cpu")


def test_api_rejects_bad_requests(micro_trio):
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="static", w=0.5, device="cpu")
    with pytest.raises(ValueError, match="empty"):
        sg.generate(["ok", ""], max_new_tokens=4)
    with pytest.raises(ValueError, match="context window"):
        sg.generate(["x" * 10_000], max_new_tokens=4)
    with pytest.raises(ValueError, match="gamma"):
        sg.generate(["ok"], gamma=0)
    with pytest.raises(ValueError, match="unknown method"):
        SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="nope", device="cpu")
    with pytest.raises(ValueError, match="needs head=PATH"):
        SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="head", device="cpu")


def test_cli_round_trip_with_bad_lines(micro_trio, tmp_path):
    lines = [
        json.dumps({"prompt": PROMPTS[0], "id": "first"}),
        json.dumps({"prompt": ""}),  # empty prompt
        "",  # empty line
        "{not json",
        json.dumps({"text": "no prompt field"}),
        json.dumps({"prompt": PROMPTS[1], "temperature": 0, "max_new_tokens": 8}),
        json.dumps({"prompt": PROMPTS[2], "gamma": "four"}),
        json.dumps({"prompt": PROMPTS[2], "seed": 3}),
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    cli_main(["--models-dir", str(micro_trio), "--prompts-file", str(src), "--out", str(out), "--device", "cpu",
              "--max-new-tokens", "12", "--gamma", "3", "--batch-size", "2"])
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in recs] == list(range(1, len(lines) + 1))
    errors = {r["line"]: r["error"] for r in recs if "error" in r}
    assert set(errors) == {2, 3, 4, 5, 7}
    assert "prompt is empty" in errors[2] and "empty line" in errors[3] and "invalid JSON" in errors[4]
    assert 'missing field "prompt"' in errors[5] and '"gamma" must be an integer' in errors[7]
    ok = [r for r in recs if "error" not in r]
    assert [r["prompt"] for r in ok] == [PROMPTS[0], PROMPTS[1], PROMPTS[2]] and ok[0]["id"] == "first"
    assert len(ok[1]["token_ids"]) <= 8 and ok[1]["stats"]["temperature"] == 0.0
    # The record's text is its tokens decoded, and its statistics count them.
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, device="cpu")
    for r in ok:
        assert r["text"] == sg.tokenizer.decode(r["token_ids"], skip_special_tokens=True)
        assert r["stats"]["new_tokens"] == len(r["token_ids"]) and r["stats"]["rounds"] >= 1
    # A request decodes the same through the CLI as through the API (same settings, same batch).
    (c,) = sg.generate([PROMPTS[1]], max_new_tokens=8, temperature=0.0, gamma=3, seed=0)
    assert c.token_ids == ok[1]["token_ids"]
    assert not (tmp_path / "out.jsonl.partial").exists()


def test_bench_gpu_smoke_on_cpu(tmp_path, capsys):
    """bench/gpu.py --device cpu --smoke: every method (the rules and a random feature drafter included) at both batch
    sizes, a JSON file and a markdown table last."""
    from bench.gpu import METHODS
    from bench.gpu import main as bench_main

    out = tmp_path / "bench.json"
    result = bench_main(["--device", "cpu", "--smoke", "--with-records", "--out", str(out)])
    assert json.loads(out.read_text())["rows"] == json.loads(json.dumps(result["rows"]))
    rows = {(r["method"], r["batch"], r["records"]): r for r in result["rows"]}
    assert set(rows) == {(m, b, False) for m in METHODS for b in (1, 4)} | {(m, b, True) for m in ("sd", "head")
                                                                              for b in (1, 4)}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["new_tokens"] == 16 * r["batch"]
        assert sum(r["share"].values()) == pytest.approx(1.0)
        # the prefills are inside the wall time and reported apart: decoding alone runs faster than end to end
        assert 0 < r["prefill_s"] < r["seconds"] and r["decode_tokens_per_s"] > r["tokens_per_s"]
        if r["gamma"]:  # speculative methods: measured L within [0, γ] and a throughput model to compare with
            assert 0 <= r["L"] <= r["gamma"] and r["model_speedup"] > 0 and r["refined_speedup"] > 0
            assert r["measured_over_model_decode"] == pytest.approx(r["vs_base_decode"] / r["model_speedup"])
        else:
            assert r["L"] == 0 and r["share"]["proposer"] == 0
    assert rows[("cd", 1, False)]["share"]["amateur"] > 0 and rows[("ar_target", 1, False)]["vs_ar_target"] == 1.0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[-1].startswith("| dcd_feature (vs cd)")
    assert table[-len(rows) - 2].startswith("| method | batch | tok/s")
    # a feature drafter's c is its own step's cost, far below the draft LM's here (one layer vs the draft model)
    assert rows[("sd_feature", 1, False)]["c"] > 0 and rows[("dcd_feature", 1, False)]["base"] == "cd"


def test_bench_gpu_times_drafting_cells_again_at_extra_gammas(tmp_path, capsys):
    """--extra-gammas 2: every drafting cell (not ar_target) again at γ = 2, with its own (γ+1)-pass probed for the
    refined model, named with its γ in the table; L stays within each cell's own γ."""
    from bench.gpu import main as bench_main

    result = bench_main(["--device", "cpu", "--smoke", "--methods", "ar_target", "sd", "cascade", "--gamma", "4",
                         "--extra-gammas", "2", "--out", str(tmp_path / "b.json")])
    rows = {(r["method"], r["gamma"]): r for r in result["rows"] if r["batch"] == 1}
    assert set(rows) == {("ar_target", 0), ("sd", 4), ("cascade", 4), ("sd", 2), ("cascade", 2)}
    costs = result["step_costs_s"][1]
    assert set(costs["target_v_by_gamma"]) == {4, 2} and costs["target_v"] == costs["target_v_by_gamma"][4]
    for (_, g), r in rows.items():
        if g:
            assert 0 <= r["L"] <= g and r["model_speedup"] == pytest.approx((r["L"] + 1) / (g * r["c"] + 1))
            assert r["refined_speedup"] == pytest.approx(  # the refined model charges this γ's pass
                (r["L"] + 1) * costs["target_1"]
                / (r["proposer_calls_per_round"] * costs["draft_1"] + costs["target_v_by_gamma"][g]))
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("| sd γ=2 |") for line in lines) and any(line.startswith("| sd |") for line in lines)


def test_bench_gpu_probes_every_step_cost_in_turn():
    """The cost probe takes turns (one forward of each named call per step), so a drift in the machine's speed moves
    every cost alike; each cost is the median of its own calls, each from a warm cache rolled back after it."""
    from bench.gpu import step_costs

    log = []

    class Fake:
        device = torch.device("cpu")

        def __init__(self, name, seconds):
            self.name, self.seconds, self.cached = name, seconds, 0

        def prefill(self, prompts):
            self.cached = len(prompts[0])

        def feed(self, tok):
            log.append((self.name, tok.shape[1], self.cached))
            self.cached += tok.shape[1]
            time.sleep(self.seconds * tok.shape[1])

        def rollback(self, n):
            self.cached -= int(n[0])

    big, small = Fake("target", 0.004), Fake("draft", 0.001)
    costs = step_costs({"target_1": (big, 1), "draft_1": (small, 1), "target_v3": (big, 3)}, [[1, 2, 3]], steps=3)
    assert log == [("target", 1, 3), ("draft", 1, 3), ("target", 3, 3)] * 5  # in turn, always from the prompt
    assert costs["target_v3"] > costs["target_1"] > costs["draft_1"] > 0


def test_bench_gpu_pairs_each_drafting_run_with_the_baseline_runs_around_it(tmp_path, capsys):
    """--paired-baseline: ar_target opens the repeat and runs again after each drafting cell; each drafting row's
    paired ratio is against the mean of the baseline runs just before and after its own. cascade_pbonus (the bonus
    token from p) makes one draft call per round fewer than cascade."""
    from bench.gpu import main as bench_main

    result = bench_main(["--device", "cpu", "--smoke", "--methods", "ar_target", "cascade", "cascade_pbonus",
                         "--gamma", "4", "--paired-baseline", "--out", str(tmp_path / "b.json")])
    for b in (1, 4):
        rows = {r["method"]: r for r in result["rows"] if r["batch"] == b}
        base = rows["ar_target"]
        assert len(base["seconds_all_runs"]) == 3 and base["paired_base"] is None
        for name, runs in (("cascade", [0, 1]), ("cascade_pbonus", [1, 2])):
            r, pb = rows[name], rows[name]["paired_base"]
            assert pb["runs"] == runs
            assert pb["seconds"] == pytest.approx(sum(base["seconds_all_runs"][i] for i in runs) / 2)
            assert r["vs_base_paired"] == pytest.approx(r["tokens_per_s"] * pb["seconds"] / base["new_tokens"])
            assert r["measured_over_model_decode_paired"] == pytest.approx(r["vs_base_decode_paired"]
                                                                         / r["model_speedup"])
        assert rows["cascade"]["proposer_calls_per_round"] > rows["cascade_pbonus"]["proposer_calls_per_round"]
    out = capsys.readouterr().out
    assert "| cascade_pbonus | 1 |" in out.split("--paired-baseline")[-1]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SPECDEC_TEST_COMPILE") != "1",
                    reason="torch.compile traces the HF forward for over a minute on a 2-core CPU (eager backend; "
                           "inductor took > 8 min here): set SPECDEC_TEST_COMPILE=1 to run")
def test_compile_flag_decodes_the_same_tokens():
    from specdec.testing import random_pair

    target, draft = random_pair(vocab_size=64, init_std=0.5)
    prompts = [[1, 5, 9], [1, 3]]
    outs = [generate(target, DraftModelProposer(draft), prompts, gamma=3, max_new_tokens=12, temperature=0,
                     records=False, compile=c) for c in (False, "eager")]
    assert outs[0].tokens == outs[1].tokens
    assert target.model._specdec_compiled == "eager" and draft.model._specdec_compiled == "eager"


def test_cli_refuses_to_write_over_its_prompts(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "Q: 1+1?"}) + "\n")
    for out in (src, tmp_path / "in"):  # the output itself, or its .partial, would be the prompts file
        if out != src:
            src.rename(tmp_path / "in.partial")
            src = tmp_path / "in.partial"
        with pytest.raises(SystemExit):
            cli_main(["--prompts-file", str(src), "--out", str(out)])
        assert "would overwrite the prompts file" in capsys.readouterr().err
        assert json.loads(src.read_text()) == {"prompt": "Q: 1+1?"}


def test_cli_resume_keeps_finished_lines(micro_trio, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps({"prompt": p}) for p in PROMPTS[:3]]
    src.write_text("\n".join(lines) + "\n")
    argv = ["--models-dir", str(micro_trio), "--prompts-file", str(src), "--out", str(out), "--device", "cpu",
            "--max-new-tokens", "6", "--temperature", "1.0", "--gamma", "4", "--seed", "0", "--batch-size", "8"]
    cli_main(argv)  # a complete run, to learn the identity record the CLI writes first
    first = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(first) == 3 and "line_sha" not in first[0]
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, device="cpu")
    defaults = {"max_new_tokens": 6, "temperature": 1.0, "gamma": 4, "seed": 0}
    header = {"resume_identity": run_identity(sg, defaults, 8)}
    partial = tmp_path / "out.jsonl.partial"

    def interrupted(identity: dict) -> None:
        """Lines 1 and 2 done ("kept"), then a torn line, as a kill leaves them."""
        recs = [{**first[i], "text": "kept", "line_sha": line_sha(lines[i])} for i in (0, 1)]
        partial.write_text("".join(json.dumps(r) + "\n" for r in [identity, *recs]) + '{"line": 3, "te')

    # --resume keeps lines 1-2, decodes line 3, and a line whose text changed is decoded again
    interrupted(header)
    lines[1] = json.dumps({"prompt": PROMPTS[1], "id": "edited"})
    src.write_text("\n".join(lines) + "\n")
    cli_main(argv + ["--resume"])
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert recs[0]["text"] == "kept" and recs[1]["text"] != "kept" and recs[1]["id"] == "edited"
    assert recs[2]["line"] == 3 and recs[2]["token_ids"] and not partial.exists()
    # a partial file decoded with other settings is refused and left as it was
    interrupted({"resume_identity": {**header["resume_identity"], "defaults": {**defaults, "max_new_tokens": 9}}})
    before = partial.read_text()
    with pytest.raises(ValueError, match="max_new_tokens"):
        run_file(sg, src, out, defaults, 8, resume=True)
    assert partial.read_text() == before


def test_inference_mode_keeps_verify_input_check():
    """records=False reads verify's zero-probability check with the round's one device read: same error."""
    from specdec.proposers import Proposal
    from specdec.testing import random_pair

    class Lying(DraftModelProposer):
        def propose(self, gamma, **kw):
            p = super().propose(gamma, **kw)
            return Proposal(p.tokens, p.probs.scatter(-1, p.tokens[..., None], 0.0)[:, :gamma], p.hidden)

    target, draft = random_pair(vocab_size=32)
    for records in (True, False):
        with pytest.raises(ValueError, match="probability 0"):
            generate(target, Lying(draft), [[1, 2], [1]], gamma=2, max_new_tokens=4, records=records)


def test_bench_gpu_builds_every_rule_through_the_registry():
    """bench/gpu.py times the rule evaluation decodes: each method's rule is the registry's, with the knob given."""
    from types import SimpleNamespace

    from bench.gpu import method_spec
    from specdec.targets import CascadeRule, FlyRule, FuzzyRule, LossyRule, TypicalRule
    from specdec.testing import random_pair

    target, draft = random_pair(vocab_size=32)
    pair = SimpleNamespace(target=target, draft=draft, amateur=None, tokenizer=None)
    args = SimpleNamespace(gamma=3, w=0.5, lenience=0.3, cascade_threshold=0.02, fsd_threshold=2.0, epsilon=0.1,
                           fly_entropy=0.7, alpha=0.5, beta=0.1, drafter=None)
    for name, cls, attr, value in [("lossy", LossyRule, "lenience", 0.3), ("cascade", CascadeRule, "threshold", 0.02),
                                   ("fsd", FuzzyRule, "threshold", 2.0), ("typical", TypicalRule, "epsilon", 0.1),
                                   ("fly", FlyRule, "entropy_threshold", 0.7)]:
        proposer, rule, gamma, amateur = method_spec(name, pair, args)
        assert isinstance(rule, cls) and getattr(rule, attr) == value and gamma == 3 and amateur is None
        assert proposer is not None
    with pytest.raises(ValueError, match="needs a trained drafter"):
        method_spec("sd_feature", pair, args)


def test_bench_gpu_times_a_task_s_prompts_as_evaluation_formats_them(micro_trio, tmp_path):
    """--task: the benchmark decodes the task's own prompts, token for token those eval/run.py feeds the models."""
    from types import SimpleNamespace

    from bench.gpu import main as bench_main
    from bench.gpu import task_prompts
    from data.loaders import load_examples
    from data.tasks import get_task
    from eval.run import encode_prompts
    from specdec.loading import Models

    models = Models({"dir": str(micro_trio), "device": "cpu", "dtype": "float32"})
    args = SimpleNamespace(task="gsm8k", data_path=None, n_prompts=3, data_seed=5, new_tokens=4, gamma=4)
    rows = load_examples("gsm8k", source="synthetic", n=3, seed=5).rows
    window = models.target.max_positions
    want, _ = encode_prompts(get_task("gsm8k"), rows, models.tokenizer, window, 9)
    assert task_prompts(args, models.tokenizer, window) == want and len(want) == 3
    result = bench_main(["--device", "cpu", "--dtype", "float32", "--models-dir", str(micro_trio), "--task", "gsm8k",
                         "--n-prompts", "3", "--data-seed", "5", "--methods", "ar_target", "sd", "typical",
                         "--batch-sizes", "1", "--new-tokens", "4", "--rotate", "3", "--out", str(tmp_path / "b.json")])
    assert result["pair_info"]["prompts"].startswith("gsm8k: 3 rows, data seed 5")
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == {"ar_target", "sd", "typical"}
    # --rotate 3 at batch 1: each run decodes the three prompts in turn, read as one (4 tokens each)
    assert all(r["new_tokens"] == 12 for r in rows.values()) and rows["ar_target"]["rounds"] == 12
    assert 0 <= rows["sd"]["L"] <= 4 and rows["sd"]["rounds"] >= 3
