"""Independent NumPy reading of ../shared/docs/policies.md (every policy).

Written from the contract, not from the C code: whole-array operations,
float64 arithmetic, one function per policy over one (layer, KV head) list.
Imported by check_compress.py; needs only numpy.

A list is a dict with k [T, d], v [T, d] (float64), n [T] degrees and
score [T] (H2O), plus `slot`: for every input slot the current slot or -1.
"""
import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(state):
    """One SplitMix64 step: returns (new_state, output)."""
    state = (state + GOLDEN) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def scaled(text, scale):
    """The decimal text times `scale`, rounded to nearest from its digits
    (ties away from zero; not through a float, whose ties fall either way)."""
    return int((Decimal(text) * scale).to_integral_value(rounding=ROUND_HALF_UP))


def parse_rate(s):
    assert 0 < Decimal(s) <= 1
    return scaled(s, 1000)


def budget_entries(text, n_tokens):
    if text.endswith("%"):
        ppm = scaled(text[:-1], 10000)
    elif any(c in text for c in ".eE"):
        ppm = scaled(text, 1000000)
    else:
        return int(text)
    return (ppm * n_tokens + 999999) // 1000000


def unit_rows(x):
    norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    return np.where(norm < 1e-30, 0.0, x / np.where(norm < 1e-30, 1.0, norm))


def edit(lst, target):
    """target[t]: t kept, -1 evicted, b merged into b. Degree-weighted
    centroids of raw vectors, survivors in slot order."""
    T = len(target)
    target = np.asarray(target)
    n = lst["n"]
    gone = target < 0
    dst = np.where(gone, np.arange(T), target)
    w = np.where(gone, 0.0, n)
    nn = np.zeros(T)
    np.add.at(nn, dst, w)
    kk = np.zeros_like(lst["k"])
    vv = np.zeros_like(lst["v"])
    np.add.at(kk, dst, w[:, None] * lst["k"])
    np.add.at(vv, dst, w[:, None] * lst["v"])
    sc = np.zeros(T)
    np.add.at(sc, dst, np.where(gone, 0.0, lst["score"]))
    keep = target == np.arange(T)
    merged_into = np.zeros(T, dtype=bool)
    merged_into[target[(~gone) & (~keep)]] = True
    # Untouched survivors keep their exact vectors (protected: bit for bit).
    kk = np.where(merged_into[:, None], kk / np.where(nn == 0, 1, nn)[:, None], lst["k"])
    vv = np.where(merged_into[:, None], vv / np.where(nn == 0, 1, nn)[:, None], lst["v"])
    # Rounded to float32 as the cache stores it.
    kk = kk.astype(np.float32).astype(np.float64)
    vv = vv.astype(np.float32).astype(np.float64)
    nn = np.where(merged_into, nn, n).astype(np.float32).astype(np.float64)
    new_index = np.cumsum(keep) - 1
    final = np.where(gone, -1, new_index[dst])
    slot = lst["slot"]
    lst["slot"] = np.where(slot >= 0, final[np.maximum(slot, 0)], -1)
    lst["k"], lst["v"], lst["n"], lst["score"] = kk[keep], vv[keep], nn[keep], sc[keep]


def keep_mask(lst, mask):
    T = len(mask)
    edit(lst, np.where(mask, np.arange(T), -1))


def top_by_score(score, count):
    """Indices of the `count` highest scores, ties: lower index first."""
    order = np.lexsort((np.arange(len(score)), -np.asarray(score)))
    return order[:max(count, 0)]


def streaming(lst, B, p):
    T = len(lst["n"])
    s = p["sinks"]
    t = np.arange(T)
    keep_mask(lst, (t < s) | (t >= T - (B - s)))


def h2o(lst, B, p):
    T = len(lst["n"])
    r = p["recent"]
    keep = np.zeros(T, dtype=bool)
    keep[T - r:] = True
    keep[top_by_score(lst["score"][:T - r], B - r)] = True
    keep_mask(lst, keep)


def snapkv(lst, B, p, q):
    """q: [group, W_all, d] queries of this KV group (last rows newest)."""
    T, d = lst["k"].shape
    W, K = p["window"], p["kernel"]
    q = q[:, -W:, :]
    logits = q @ lst["k"].T / math.sqrt(d) + np.log(lst["n"])[None, None, :]
    visible = np.arange(T)[None, :] <= (T - W + np.arange(W))[:, None]
    logits = np.where(visible[None], logits, -np.inf)
    prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    s = prob.sum(axis=1)[:, :T - W]  # [group, T - W]
    n = T - W
    pad = K // 2
    if p["pooling"] == "max":
        padded = np.pad(s, ((0, 0), (pad, pad)), constant_values=-np.inf)
        pooled = np.lib.stride_tricks.sliding_window_view(padded, K, axis=1)[:, :n].max(axis=-1)
    else:
        padded = np.pad(s, ((0, 0), (pad, pad)))
        pooled = np.lib.stride_tricks.sliding_window_view(padded, K, axis=1)[:, :n].sum(axis=-1) / K
    score = pooled.mean(axis=0)
    keep = np.zeros(T, dtype=bool)
    keep[n:] = True
    keep[top_by_score(score, B - W)] = True
    keep_mask(lst, keep)


def kmeans(lst, B, p):
    T = len(lst["n"])
    s, r, iters = p["sinks"], p["recent"], p["iters"]
    M, k = T - s - r, B - s - r
    if k >= M:
        return
    feats = unit_rows(lst["k"][s:T - r])
    w = lst["n"][s:T - r]
    cen = feats[((2 * np.arange(k) + 1) * M) // (2 * k)].copy()

    def nearest(cen):
        sim = unit_rows(feats) @ unit_rows(cen).T
        return sim.argmax(axis=1)  # first maximum: lowest cluster index

    for _ in range(iters):
        cl = nearest(cen)
        wsum = np.bincount(cl, weights=w, minlength=k)
        tot = np.zeros_like(cen)
        np.add.at(tot, cl, w[:, None] * feats)
        mean = tot / np.where(wsum == 0, 1, wsum)[:, None]
        norm = np.sqrt((mean * mean).sum(axis=1))
        ok = (wsum > 0) & (norm >= 1e-30)
        cen[ok] = mean[ok] / norm[ok][:, None]
    cl = nearest(cen)
    first = np.full(k, T, dtype=np.int64)
    np.minimum.at(first, cl, s + np.arange(M))
    target = np.arange(T)
    target[s:T - r] = first[cl]
    edit(lst, target)


def csm_partition(kind, seed, j, layers, l, heads, h, chunk, L):
    """Boolean mask of the local offsets that form the source set A."""
    half = (L + 1) // 2
    off = np.arange(L)
    if kind == "alternating":
        return off % 2 == 0
    if kind == "sequential":
        return off < half
    state = (seed + GOLDEN * (1 + ((((j * layers + l) * heads + h) << 20) + chunk))) & MASK64
    perm = list(range(L))
    for i in range(L - 1, 0, -1):
        state, x = splitmix64(state)
        jj = x % (i + 1)
        perm[i], perm[jj] = perm[jj], perm[i]
    mask = np.zeros(L, dtype=bool)
    mask[perm[:half]] = True
    return mask


def csm_round(lst, B, p, j, layers, l, heads, h):
    """One CSM round on one list; returns the number of candidates."""
    T = len(lst["n"])
    s, r, C = p["sinks"], p["recent"], p["chunk"]
    M = T - s - r
    n_chunks = -(-M // C)
    kn = unit_rows(lst["k"][s:T - r])
    pad = n_chunks * C - M
    blocks = np.concatenate([kn, np.zeros((pad, kn.shape[1]))]).reshape(n_chunks, C, -1)
    is_a = np.zeros((n_chunks, C), dtype=bool)
    valid = (np.arange(n_chunks * C) < M).reshape(n_chunks, C)
    for c in range(n_chunks):
        L = min(C, M - c * C)
        is_a[c, :L] = csm_partition(p["partition"], p["seed"], j, layers, l, heads, h, c, L)
    is_b = valid & ~is_a
    sim = blocks @ blocks.transpose(0, 2, 1)  # [chunk, a, b]
    sim = np.where(is_b[:, None, :], sim, -np.inf)
    best = sim.argmax(axis=2)  # first maximum: lowest slot
    score = sim.max(axis=2)
    cand = is_a & valid & is_b.any(axis=1)[:, None]
    chunk_of, off = np.nonzero(cand)
    a_slot = s + chunk_of * C + off
    b_slot = s + chunk_of * C + best[chunk_of, off]
    sa = score[chunk_of, off]
    if len(a_slot) == 0:
        return 0
    if p["schedule"] == "constant":
        rate = p["r_init"]
    else:
        rate = max(p["r_min"], p["r_init"] - j * p["r_step"])
    m = min((rate * len(a_slot) + 999) // 1000, T - B)
    order = np.lexsort((a_slot, -sa))[:m]
    target = np.arange(T)
    target[a_slot[order]] = b_slot[order]
    edit(lst, target)
    return len(a_slot)


DEFAULTS = {
    "full": {},
    "streaming": {"sinks": 4, "interval": 64},
    "snapkv": {"window": 32, "kernel": 7, "pooling": "max", "decode": "off", "interval": 64},
    "h2o": {"recent": 64, "interval": 64},
    "kmeans": {"sinks": 4, "recent": 64, "interval": 64, "iters": 10},
    "centroid": {"sinks": 4, "recent": 64, "chunk": 32, "r_init": "0.5", "r_step": "0.1",
                 "r_min": "0.1", "interval": 64, "partition": "alternating", "seed": 0,
                 "degree_bias": "on", "schedule": "linear"},
}
RATES = ("r_init", "r_step", "r_min")


def params(policy, sets):
    p = dict(DEFAULTS[policy])
    for kv in sets:
        key, val = kv.split("=", 1)
        p[key] = val
    for key, val in p.items():
        if key in RATES:
            p[key] = parse_rate(str(val))
        elif isinstance(DEFAULTS[policy].get(key), int):
            p[key] = int(val)
    return p


def compress(policy, sets, budget, dump):
    """dump: dict of arrays as read from the input file. Returns
    (k, v, degree, length, assign) laid out as `ckv compress` writes them."""
    k, v = dump["k"].astype(np.float64), dump["v"].astype(np.float64)
    layers, heads, T0, d = k.shape
    length = dump.get("length", np.full((layers, heads), T0))
    n = dump.get("degree", np.ones((layers, heads, T0)))
    score = dump.get("h2o_score", np.zeros((layers, heads, T0)))
    round0 = int(dump.get("csm_round", 0))
    sets = list(sets)
    for kv in list(sets):
        if kv.startswith("round=") and policy == "centroid":
            round0 = int(kv[6:])
            sets.remove(kv)
    p = params(policy, sets)
    B = budget_entries(budget, int(dump["prompt_tokens"]))
    lists = {}
    for l in range(layers):
        for h in range(heads):
            T = int(length[l, h])
            lists[l, h] = {"k": k[l, h, :T], "v": v[l, h, :T], "n": n[l, h, :T].astype(np.float64),
                           "score": score[l, h, :T].astype(np.float64),
                           "slot": np.where(np.arange(T0) < T, np.arange(T0), -1)}
    j = round0
    if policy == "centroid":
        while True:
            found = 0
            for (l, h), lst in lists.items():
                if len(lst["n"]) > B:
                    found += csm_round(lst, B, p, j, layers, l, heads, h)
            if not found:
                break
            j += 1
    else:
        q = dump.get("q_window")
        for (l, h), lst in lists.items():
            if policy == "full" or len(lst["n"]) <= B:
                continue
            if policy == "streaming":
                streaming(lst, B, p)
            elif policy == "h2o":
                h2o(lst, B, p)
            elif policy == "kmeans":
                kmeans(lst, B, p)
            elif policy == "snapkv":
                g = q.shape[1] // heads
                snapkv(lst, B, p, q[l, h * g:(h + 1) * g].astype(np.float64))
    out_len = np.array([[len(lists[l, h]["n"]) for h in range(heads)] for l in range(layers)])
    T1 = out_len.max()
    ok = np.zeros((layers, heads, T1, d))
    ov = np.zeros((layers, heads, T1, d))
    on = np.zeros((layers, heads, T1))
    assign = np.zeros((layers, heads, T0), dtype=np.int64)
    for (l, h), lst in lists.items():
        t = len(lst["n"])
        ok[l, h, :t], ov[l, h, :t], on[l, h, :t] = lst["k"], lst["v"], lst["n"]
        assign[l, h] = lst["slot"]
    return ok, ov, on, out_len, assign, j
