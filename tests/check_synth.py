#!/usr/bin/env python3
"""Reads `ckv synth` output with the independent gguf-py reader and checks
keys, tensor names/shapes/types, weight statistics and the tokenizer.

Uses only numpy and gguf. The ckv binary comes from $CKV."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from gpt2_bytes import bytes_to_unicode  # noqa: E402

CKV = os.environ.get("CKV", "build/ckv")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def synth(path, *args):
    r = subprocess.run([CKV, "synth", *args, "--out", path], capture_output=True, text=True)
    return r.returncode, r.stderr


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def check_model(path, arch, layers, hidden, heads, kv_heads, head_dim, ff, vocab, ttype, untied):
    r = gguf.GGUFReader(path)
    tag = f"{arch}/{ttype.name}"
    check(field(r, "general.architecture") == arch, f"{tag}: architecture")
    expect = {
        "block_count": layers, "embedding_length": hidden, "attention.head_count": heads,
        "attention.head_count_kv": kv_heads, "feed_forward_length": ff,
        "rope.dimension_count": head_dim, "vocab_size": vocab,
    }
    for k, v in expect.items():
        check(field(r, f"{arch}.{k}") == v, f"{tag}: {arch}.{k} = {field(r, f'{arch}.{k}')}, want {v}")
    has_kl = field(r, f"{arch}.attention.key_length")
    check((has_kl == head_dim) if head_dim * heads != hidden else has_kl is None,
          f"{tag}: key_length {has_kl}")
    check(abs(field(r, f"{arch}.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-9, f"{tag}: rms eps")
    check(field(r, f"{arch}.rope.freq_base") > 0, f"{tag}: rope.freq_base")

    toks = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    check(field(r, "tokenizer.ggml.model") == "gpt2", f"{tag}: tokenizer model")
    check(field(r, "tokenizer.ggml.pre") == "default", f"{tag}: tokenizer pre")
    check(len(toks) == vocab and len(types) == vocab, f"{tag}: vocab arrays length")
    check(len(set(toks)) == len(toks), f"{tag}: duplicate tokens")
    b2u = bytes_to_unicode()
    check(set(b2u.values()) <= set(toks), f"{tag}: missing GPT-2 byte symbols")
    ids = {t: i for i, t in enumerate(toks)}
    for m in merges:
        a, b = m.split(" ")
        check(a in ids and b in ids and a + b in ids, f"{tag}: merge '{m}' parts/result not in vocab")
    for special in ("<|im_start|>", "<|im_end|>"):
        check(special in ids and types[ids[special]] == 3, f"{tag}: {special} control token")
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    check(toks[bos] == "<|im_start|>" and toks[eos] == "<|im_end|>", f"{tag}: bos/eos ids")
    tmpl = field(r, "tokenizer.chat_template")
    check(tmpl is not None and "<|im_start|>" in tmpl and "add_generation_prompt" in tmpl,
          f"{tag}: chat template")

    q, kv = heads * head_dim, kv_heads * head_dim
    want = {"token_embd.weight": ([hidden, vocab], ttype), "output_norm.weight": ([hidden], None)}
    if untied:
        want["output.weight"] = ([hidden, vocab], ttype)
    for i in range(layers):
        p = f"blk.{i}."
        want.update({
            p + "attn_norm.weight": ([hidden], None), p + "ffn_norm.weight": ([hidden], None),
            p + "attn_q.weight": ([hidden, q], ttype), p + "attn_k.weight": ([hidden, kv], ttype),
            p + "attn_v.weight": ([hidden, kv], ttype), p + "attn_output.weight": ([q, hidden], ttype),
            p + "ffn_gate.weight": ([hidden, ff], ttype), p + "ffn_up.weight": ([hidden, ff], ttype),
            p + "ffn_down.weight": ([ff, hidden], ttype),
        })
        if arch == "qwen2":
            want.update({p + "attn_q.bias": ([q], None), p + "attn_k.bias": ([kv], None),
                         p + "attn_v.bias": ([kv], None)})
        if arch == "qwen3":
            want.update({p + "attn_q_norm.weight": ([head_dim], None),
                         p + "attn_k_norm.weight": ([head_dim], None)})
    got = {t.name: t for t in r.tensors}
    check(set(got) == set(want), f"{tag}: tensor set differs: {sorted(set(got) ^ set(want))}")
    for name, (shape, ty) in want.items():
        t = got.get(name)
        if t is None:
            continue
        check([int(x) for x in t.shape] == shape, f"{tag}: {name} shape {list(t.shape)} want {shape}")
        ty = ty or gguf.GGMLQuantizationType.F32
        check(t.tensor_type == ty, f"{tag}: {name} type {t.tensor_type.name} want {ty.name}")
        y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        check(np.all(np.isfinite(y)), f"{tag}: {name} not finite")
        if "norm" in name:
            check(np.all(y != 0) and 0.8 < y.mean() < 1.2 and y.std() < 0.3,
                  f"{tag}: {name} norm stats mean {y.mean()} std {y.std()}")
        else:
            check(abs(y.mean()) < 0.01 and 0.01 < y.std() < 0.04,
                  f"{tag}: {name} stats mean {y.mean()} std {y.std()}")
    return r


def main():
    T = gguf.GGMLQuantizationType
    with tempfile.TemporaryDirectory() as d:
        cases = [
            ("llama", 2, 64, 4, 2, 16, 128, 300, "f32", T.F32, False, []),
            ("llama", 1, 64, 4, 4, 16, 96, 512, "q4_1", T.Q4_1, True, ["--untied"]),
            ("qwen2", 2, 64, 4, 1, 16, 64, 280, "q8_0", T.Q8_0, False, []),
            ("qwen3", 2, 64, 4, 2, 32, 96, 300, "q4_0", T.Q4_0, False, ["--head-dim", "32"]),
            ("qwen3", 1, 32, 2, 2, 16, 64, 300, "f16", T.F16, False, []),
            ("llama", 1, 32, 2, 1, 16, 64, 300, "bf16", T.BF16, False, []),
        ]
        for n, (arch, L, H, nh, nkv, hd, ff, V, tname, ttype, untied, extra) in enumerate(cases):
            path = os.path.join(d, f"m{n}.gguf")
            rc, err = synth(path, "--arch", arch, "--layers", str(L), "--hidden", str(H),
                            "--heads", str(nh), "--kv-heads", str(nkv), "--ff", str(ff),
                            "--vocab", str(V), "--type", tname, "--seed", "5", *extra)
            check(rc == 0, f"synth {arch} {tname} exit {rc}: {err}")
            if rc == 0:
                check_model(path, arch, L, H, nh, nkv, hd, ff, V, ttype, untied)

        # Seeded: same seed gives identical bytes, another seed other weights;
        # norm weights are F32 whatever --type is, and seeded per tensor.
        base = ["--arch", "llama", "--layers", "1", "--hidden", "32", "--heads", "2", "--ff", "64"]
        a, b, c, e = (os.path.join(d, x + ".gguf") for x in "abce")
        synth(a, *base, "--seed", "9")
        synth(b, *base, "--seed", "9")
        synth(c, *base, "--seed", "10")
        synth(e, *base, "--seed", "9", "--type", "q8_0")
        with open(a, "rb") as fa, open(b, "rb") as fb, open(c, "rb") as fc:
            da, db, dc = fa.read(), fb.read(), fc.read()
        check(da == db, "same seed gave different files")
        check(da != dc, "different seeds gave identical files")
        na = gguf.GGUFReader(a).get_tensor(1)
        ne = [t for t in gguf.GGUFReader(e).tensors if t.name == na.name][0]
        check(np.array_equal(na.data, ne.data), "norm weights depend on --type")

        # Bad shapes are usage errors naming the problem.
        rc, err = synth(os.path.join(d, "bad.gguf"), "--arch", "llama", "--layers", "1",
                        "--hidden", "48", "--heads", "2", "--type", "q4_0")
        check(rc == 2 and "block size 32" in err, f"hidden 48 with q4_0: rc {rc}, {err}")
        check(not os.path.exists(os.path.join(d, "bad.gguf")), "failed synth left a file")
        rc, err = synth(os.path.join(d, "bad.gguf"), "--arch", "gpt9", "--layers", "1",
                        "--hidden", "32", "--heads", "2")
        check(rc == 2 and "gpt9" in err, f"unknown arch: rc {rc}, {err}")
        rc, err = synth(os.path.join(d, "bad.gguf"), "--arch", "llama", "--layers", "1",
                        "--hidden", "32", "--heads", "3", "--kv-heads", "2", "--head-dim", "8")
        check(rc == 2 and "kv-heads" in err, f"heads 3 kv 2: rc {rc}, {err}")
        # `ckv info` reports what gguf-py sees.
        r = subprocess.run([CKV, "info", a], capture_output=True, text=True)
        check(r.returncode == 0, f"ckv info exit {r.returncode}: {r.stderr}")
        n_tensors = len(gguf.GGUFReader(a).tensors)
        for want in ("llama.block_count = 1", "model: gpt2", "pre: default", "vocab: 512 tokens",
                     "bos: 1", "eos: 2", "chat template: yes", f"tensors ({n_tensors}):",
                     "blk.0.ffn_down.weight"):
            check(want in r.stdout, f"ckv info output lacks '{want}'")
        r = subprocess.run([CKV, "info", os.path.join(d, "missing.gguf")], capture_output=True,
                           text=True)
        check(r.returncode == 1 and "missing.gguf" in r.stderr, f"info on missing file: {r.stderr}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("check_synth: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
