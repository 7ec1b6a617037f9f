"""specdec: the speculative decoding engine (proposers, verification targets, one `verify`, the decoding loop)."""

from specdec.api import Completion, SpeculativeGenerator
from specdec.generate import GenerationOutput, generate
from specdec.models import LM, TokenizerMismatchError, check_tokenizers_match, load_model
from specdec.proposers import DraftModelProposer, NgramProposer, Proposal, Proposer
from specdec.targets import (
    CascadeRule,
    ContrastiveRule,
    ExactRule,
    HeadEnsembleRule,
    LossyRule,
    RoundScores,
    Rule,
    StaticEnsembleRule,
    contrastive_target,
    ensemble_target,
    make_rule,
)
from specdec.verify import VerifyResult, verify

__all__ = [
    "LM", "CascadeRule", "Completion", "ContrastiveRule", "DraftModelProposer", "ExactRule", "GenerationOutput",
    "HeadEnsembleRule", "LossyRule", "NgramProposer", "Proposal", "Proposer", "RoundScores", "Rule", "SpeculativeGenerator",
    "StaticEnsembleRule", "TokenizerMismatchError", "VerifyResult", "check_tokenizers_match", "contrastive_target",
    "ensemble_target", "generate", "load_model", "make_rule", "verify",
]
