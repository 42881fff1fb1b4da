"""Produces tests/fixtures/logits_smollm2.bin: next-token logits of the default
model from an independent implementation (Hugging Face transformers loading
the same GGUF, weights dequantised to fp32, eager attention). Run once, outside
the test suite:

    python3 tests/reference/make_logits_fixture.py models/SmolLM2-135M-Instruct.Q4_1.gguf

File layout (little-endian): magic "CKVL", u32 version=1, u32 n_prompts,
u32 n_vocab; per prompt: u32 n_tokens, i32 ids[n_tokens], f32 logits[n_vocab]
(the logits after the last token).
"""
import os
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village nestled between the mountains, there lived an old "
    "clockmaker who",
    # A long prompt: exercises attention over several hundred positions and RoPE far out.
    " ".join(["The quick brown fox jumps over the lazy dog number %d." % i for i in range(120)]),
]


def main():
    path = os.path.abspath(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "logits_smollm2.bin")
    d, f = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    recs = []
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0, -1].numpy().astype(np.float32)
            recs.append((ids, logits))
            print(len(ids), "tokens; top:", int(np.argmax(logits)), repr(tok.decode([int(np.argmax(logits))])))
    n_vocab = recs[0][1].shape[0]
    with open(out, "wb") as fp:
        fp.write(b"CKVL" + struct.pack("<III", 1, len(recs), n_vocab))
        for ids, lg in recs:
            fp.write(struct.pack("<I", len(ids)))
            fp.write(np.asarray(ids, dtype="<i4").tobytes())
            fp.write(lg.astype("<f4").tobytes())


if __name__ == "__main__":
    main()
