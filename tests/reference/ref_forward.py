"""A NumPy reference forward pass for llama, qwen2 and qwen3 GGUF models,
written from the published architectures (not from ckv's C code): weights
come from the `gguf` package's reader and dequantiser, math is float64.

    logits = ref_logits(path, ids)   # next-token logits after the last id
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


def load(path):
    r = GGUFReader(path)
    arch = _field(r, "general.architecture")
    a = lambda k, d=None: _field(r, f"{arch}.{k}", d)
    cfg = dict(arch=arch, n_layer=a("block_count"), n_embd=a("embedding_length"),
               n_head=a("attention.head_count"), eps=a("attention.layer_norm_rms_epsilon"),
               base=a("rope.freq_base", 10000.0))
    cfg["n_kv"] = a("attention.head_count_kv", cfg["n_head"])
    cfg["hd"] = a("attention.key_length", cfg["n_embd"] // cfg["n_head"])
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # row-major [.., ne1, ne0]
        w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
    return cfg, w


def rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, pos, base, neox):
    """x: [T, heads, d]. Rotates channel pairs by pos * base^(-2i/d)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = pos[:, None] * inv[None, :]                  # [T, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:   # pairs (i, i + d/2), the rotate_half convention
        x0, x1 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]               # pairs (2i, 2i + 1)
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def bf16(x):
    """x rounded to float32, then to the nearest bfloat16 (ties to even), as a
    bf16 KV cache stores keys and values."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def ref_logits(path, ids, kv_bf16=False):
    """kv_bf16: keys (after RoPE) and values rounded by bf16(), a bf16 cache."""
    cfg, w = load(path)
    T, H, KV, hd = len(ids), cfg["n_head"], cfg["n_kv"], cfg["hd"]
    neox = cfg["arch"] in ("qwen2", "qwen3")
    pos = np.arange(T, dtype=np.float64)
    x = w["token_embd.weight"][np.asarray(ids)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["n_layer"]):
        p = lambda n: w.get(f"blk.{l}.{n}")
        h = rms(x, p("attn_norm.weight"), cfg["eps"])
        q, k, v = h @ p("attn_q.weight").T, h @ p("attn_k.weight").T, h @ p("attn_v.weight").T
        if p("attn_q.bias") is not None:
            q, k, v = q + p("attn_q.bias"), k + p("attn_k.bias"), v + p("attn_v.bias")
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if p("attn_q_norm.weight") is not None:
            q = rms(q, p("attn_q_norm.weight"), cfg["eps"])
            k = rms(k, p("attn_k_norm.weight"), cfg["eps"])
        q, k = rope(q, pos, cfg["base"], neox), rope(k, pos, cfg["base"], neox)
        if kv_bf16:
            k, v = bf16(k), bf16(v)
        g = H // KV
        out = np.empty((T, H, hd))
        for qh in range(H):
            s = q[:, qh] @ k[:, qh // g].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, qh] = (s / s.sum(axis=1, keepdims=True)) @ v[:, qh // g]
        x = x + out.reshape(T, H * hd) @ p("attn_output.weight").T
        h = rms(x, p("ffn_norm.weight"), cfg["eps"])
        gate = h @ p("ffn_gate.weight").T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ p("ffn_up.weight").T)) @ p("ffn_down.weight").T
    out_w = w.get("output.weight", w["token_embd.weight"])
    return rms(x[-1], w["output_norm.weight"], cfg["eps"]) @ out_w.T
