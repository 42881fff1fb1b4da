#!/usr/bin/env python3
"""Produces tests/fixtures/kv_small.h5, a real SmolLM2 KV dump in the
`ckv dump-kv` format, with transformers + torch (run once, outside the test
suite; the suite only reads the committed file).

Usage: make_kv_fixture.py MODEL_DIR GGUF_NAME TEXT_JSON OUT.h5
  e.g. /work/main/models SmolLM2-135M-Instruct.Q4_1.gguf \
       $CKV_DATA_DIR/ruler/PaulGrahamEssays.json tests/fixtures/kv_small.h5

Channel layout: keys and queries are in Hugging Face layout. transformers
un-permutes the GGUF q/k weights and applies rotate_half RoPE, so every head's
channels differ from the GGUF/ckv (interleaved NORM RoPE) layout by one fixed
permutation. Every policy only uses dot products and cosines within a head,
which a per-head channel permutation leaves unchanged.

Only layers 0 and 15 of 30 are kept (2 x 512 tokens keeps the file < 2 MB)."""
import json
import sys

import h5py
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

LAYERS = [0, 15]
TOKENS = 512
WINDOW = 32


def main():
    model_dir, gguf_name, text_json, out = sys.argv[1:5]
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf_name,
                                                 dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    text = json.load(open(text_json))["text"]
    ids = tok(text[:20000], add_special_tokens=False)["input_ids"][:TOKENS]
    prompt = tok.decode(ids)
    cfg = model.config
    hd = cfg.hidden_size // cfg.num_attention_heads
    group = cfg.num_attention_heads // cfg.num_key_value_heads

    q_raw = {}
    hooks = [model.model.layers[l].self_attn.q_proj.register_forward_hook(
        lambda _m, _i, o, l=l: q_raw.__setitem__(l, o.detach())) for l in LAYERS]
    x = torch.tensor([ids])
    with torch.no_grad():
        res = model(x, use_cache=True, output_attentions=True)
    for h in hooks:
        h.remove()

    pos = torch.arange(TOKENS)[None]
    cos, sin = model.model.rotary_emb(q_raw[LAYERS[0]], pos)
    ks, vs, qs, scores = [], [], [], []
    for l in LAYERS:
        pkv = res.past_key_values
        k = pkv.layers[l].keys if hasattr(pkv, "layers") else pkv[l][0]
        v = pkv.layers[l].values if hasattr(pkv, "layers") else pkv[l][1]
        ks.append(k[0].numpy())  # [kv_heads, T, hd], post-RoPE
        vs.append(v[0].numpy())
        q = q_raw[l].view(1, TOKENS, cfg.num_attention_heads, hd).transpose(1, 2)
        q_rot, _ = apply_rotary_pos_emb(q, q, cos, sin)
        qs.append(q_rot[0, :, TOKENS - WINDOW:].numpy())
        att = res.attentions[l][0].numpy().astype(np.float64)  # [heads, T(q), T(k)]
        # The captured queries must reproduce the model's own attention rows.
        logits = np.einsum("hwd,htd->hwt", qs[-1].astype(np.float64),
                           np.repeat(ks[-1], group, axis=0).astype(np.float64)) / np.sqrt(hd)
        logits += np.triu(np.full((WINDOW, TOKENS), -np.inf), TOKENS - WINDOW + 1)
        mine = np.exp(logits - logits.max(-1, keepdims=True))
        mine /= mine.sum(-1, keepdims=True)
        assert np.abs(mine - att[:, TOKENS - WINDOW:]).max() < 1e-4, "q_window mismatch"
        per_head = att.sum(axis=1)  # received attention, summed over queries
        scores.append(per_head.reshape(cfg.num_key_value_heads, group, TOKENS).sum(axis=1))
    with h5py.File(out, "w") as f:
        f["k"] = np.stack(ks).astype(np.float32)
        f["v"] = np.stack(vs).astype(np.float32)
        f["q_window"] = np.stack(qs).astype(np.float32)
        f["h2o_score"] = np.stack(scores).astype(np.float32)
        f.attrs["prompt_tokens"] = np.int64(TOKENS)
        f.attrs["csm_round"] = np.int32(0)
        f.attrs["model"] = gguf_name + " (layers 0 and 15; Hugging Face channel layout)"
        f.attrs["prompt"] = prompt


if __name__ == "__main__":
    main()
