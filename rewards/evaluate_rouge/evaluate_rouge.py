"""ROUGE as an `evaluate` metric module kept in the repo: `evaluate.load("rewards/evaluate_rouge")` works offline.

evaluate 0.4 ships no metric scripts (`evaluate.load("rouge")` downloads one from the hub and fails offline); a
module in a local directory loads without the network. This one wraps rouge_score exactly as rewards/rouge.py does
(stemming on, F1), so its numbers equal the task reward's (tests/test_rewards_text.py checks it). The training and
evaluation path keep calling rewards/rouge.py directly: this module is for users of the `evaluate` API.

    rouge = evaluate.load("rewards/evaluate_rouge")
    rouge.compute(predictions=[...], references=[...])                 # mean F1 per ROUGE type
    rouge.compute(predictions=[...], references=[...], use_aggregator=False)   # per-example lists
"""

import datasets
import evaluate
from rouge_score import rouge_scorer

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


class EvaluateRouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="ROUGE F1 (rouge_score, stemming on), as the project's summarisation reward computes it.",
            citation="Lin, ROUGE: A Package for Automatic Evaluation of Summaries, 2004.",
            inputs_description="predictions: list of str; references: list of str; rouge_types: subset of "
                               f"{ROUGE_TYPES}; use_aggregator: mean over examples (default) or per-example lists",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Value("string")}),
        )

    def _compute(self, predictions, references, rouge_types=None, use_aggregator=True):
        types = list(rouge_types or ROUGE_TYPES)
        scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
        per = {t: [] for t in types}
        for pred, ref in zip(predictions, references):
            result = scorer.score(str(ref), str(pred))  # (target, prediction)
            for t in types:
                per[t].append(float(result[t].fmeasure))
        if use_aggregator:
            return {t: (sum(v) / len(v) if v else 0.0) for t, v in per.items()}
        return per
