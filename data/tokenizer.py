"""Character-level tokenizer for the embedded models: one token per character, every digit its own token.

Built with `tokenizers` (a BPE model with no merges is exactly a character tokenizer) and wrapped as a
Hugging Face fast tokenizer, so `AutoTokenizer.from_pretrained(dir)` loads it. Encoding adds <bos> in front;
decoding joins characters with no spaces. Characters outside printable ASCII + newline + tab map to <unk>.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, processors
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
CHARS = ["\n", "\t"] + [chr(c) for c in range(32, 127)]
VOCAB = {t: i for i, t in enumerate(SPECIALS + CHARS)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer as a Hugging Face fast tokenizer (no chat template)."""
    tok = Tokenizer(models.BPE(vocab=dict(VOCAB), merges=[], unk_token="<unk>"))
    tok.add_special_tokens(SPECIALS)
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        clean_up_tokenization_spaces=False, padding_side="left", model_max_length=4096,
    )


def save_tokenizer(out_dir: str | Path) -> PreTrainedTokenizerFast:
    tok = build_tokenizer()
    tok.save_pretrained(str(out_dir))
    return tok


# Fast path for training: a byte -> id lookup table that gives the same ids as the tokenizer.
_LUT = np.full(256, UNK_ID, dtype=np.int64)
for _c, _i in VOCAB.items():
    if len(_c) == 1:
        _LUT[ord(_c)] = _i


def encode_fast(text: str) -> np.ndarray:
    """Ids of `text` without <bos>, the same as the tokenizer gives (one id per character)."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    return np.where(cp < 256, _LUT[np.minimum(cp, 255)], UNK_ID)
