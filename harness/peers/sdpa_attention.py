#!/usr/bin/env python3
"""The peer of `ckv bench attention`: PyTorch's scaled_dot_product_attention
timed at the same shapes, on the GPU machine (torch with CUDA).

Decode (one query per sequence): the group's query heads become the query
length, q [B, KV, group, hd] over k, v [B, KV, T, hd], which is exact for a
single query and runs on every backend without GQA support. Prefill: q
[B, H, T, hd], causal, with enable_gqa. The degree bias is an additive float
mask, log(deg) per (sequence, KV head, entry), which rules out the flash
backend; the backends are tried in the order flash, efficient, cudnn, math
and the first that runs is reported. Timing, as `ckv bench attention`: CUDA
events around each call, the median of --repeats after --warmup, each call
alone (launched into an idle stream and waited for) and back to back (all
calls enqueued with an event between two, one wait at the end: stream_us);
inputs rotated over copies so that runs read device memory rather than L2.

Usage: sdpa_attention.py [--shapes shapes.csv] [grid options] [--json out.json] [--csv out.csv]
(`ckv bench attention --peer sdpa` writes shapes.csv and reads the JSON).
"""
import argparse
import csv
import math
import sys
import warnings
from statistics import median

from peer_output import fmt, write

MATMUL_FLOPS = 750e12
DTYPE_BYTES = {"bf16": 2, "fp32": 4}
FIELDS = ["kind", "batch", "kv_heads", "group", "head_dim", "context", "queries", "bias",
          "dtype", "backend", "median_us", "min_us", "max_us", "stream_us", "runs", "input_sets",
          "bytes", "gbps", "pct_copy", "flops", "tflops", "pct_matmul", "note"]


def int_list(s):
    return [int(x) for x in s.split(",") if x]


def grid(a):
    """The default grid of `ckv bench attention`, in its order."""
    rows = []
    biases = {"off": [0], "on": [1], "both": [0, 1]}[a.bias]
    prefill = [] if a.prefill == "none" else int_list(a.prefill)
    for kind in ("decode", "prefill"):
        for hd in int_list(a.head_dims):
            for g in int_list(a.groups):
                for b in (int_list(a.batches) if kind == "decode" else [1]):
                    for t in (int_list(a.contexts) if kind == "decode" else prefill):
                        for bias in biases:
                            rows.append(dict(kind=kind, batch=b, kv_heads=a.kv_heads, group=g,
                                             head_dim=hd, context=t,
                                             queries=1 if kind == "decode" else t, bias=bias))
    return rows


def read_shapes(path):
    with open(path) as f:
        return [dict(kind=r["kind"], **{k: int(r[k]) for k in r if k != "kind"})
                for r in csv.DictReader(f)]


def counts(s, elt):
    """Bytes read (keys, values, and the bias's log-degrees, at the dtype's
    size) and FLOPs, counted as `ckv bench attention` counts them."""
    lists = s["batch"] * s["kv_heads"]
    nbytes = lists * s["context"] * (2 * s["head_dim"] + s["bias"]) * elt
    n, t = s["queries"], s["context"]
    visible = n * (t - n) + n * (n + 1) / 2
    return nbytes, 4.0 * s["head_dim"] * lists * s["group"] * visible


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", help="CSV of shapes (kind,batch,kv_heads,group,head_dim,"
                    "context,queries,bias); default: the grid options")
    ap.add_argument("--contexts", default="1024,4096,16384,32768,131072")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--groups", default="4,8")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--bias", default="both", choices=["off", "on", "both"])
    ap.add_argument("--prefill", default="1024,4096,16384")
    ap.add_argument("--dtypes", default="fp32,bf16", help="fp32 (our cache's bytes), bf16")
    ap.add_argument("--max-gib", type=float, default=32.0,
                    help="skip shapes whose inputs exceed this")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--copy-bps", type=float, default=4.19e12,
                    help="copy bandwidth (bytes read and written a second) that pct_copy "
                    "divides by; `ckv bench attention` passes the rate it used "
                    "(default: the H200's 4.19e12)")
    ap.add_argument("--json")
    ap.add_argument("--csv")
    a = ap.parse_args()
    if not a.copy_bps > 0:
        ap.error(f"--copy-bps: {a.copy_bps} is not a positive rate")
    # Backends that decline a shape warn; the table says which one ran.
    warnings.filterwarnings("ignore")
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # the caller prints this line as the reason
        print(f"torch is not available: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 3
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    order = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
             ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    shapes = read_shapes(a.shapes) if a.shapes else grid(a)
    dtypes = [d for d in a.dtypes.split(",") if d]
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    out = []

    def rand(shape, dt, lo=-1.0, hi=1.0):
        return (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32) * (hi - lo)
                + lo).to(dt)

    for s in shapes:
        for dname in dtypes:
            dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dname]
            elt = DTYPE_BYTES[dname]
            nbytes, flops = counts(s, elt)
            row = dict(s, dtype=dname, backend="", median_us=None, min_us=None, max_us=None,
                       stream_us=None, runs=0, input_sets=0, bytes=nbytes, gbps=None,
                       pct_copy=None, flops=flops, tflops=None, pct_matmul=None, note="")
            B, KV, G, hd, T, n = (s["batch"], s["kv_heads"], s["group"], s["head_dim"],
                                  s["context"], s["queries"])
            H = KV * G
            mask_bytes = B * H * n * T * elt if (s["bias"] and n > 1) else 0
            if nbytes + mask_bytes > a.max_gib * 2**30:
                row["note"] = f"skipped: inputs {(nbytes + mask_bytes) / 2**30:.1f} GiB > --max-gib"
                out.append(row)
                continue
            # A causal prefill with a float mask runs on a backend that also
            # materialises the scores: past 4 GiB of mask it is not worth timing.
            if mask_bytes > 4 * 2**30:
                row["note"] = f"skipped: a {mask_bytes / 2**30:.0f} GiB mask (causal + log-degrees)"
                out.append(row)
                continue
            # Prefill is bound by arithmetic, not by bytes: one copy will do.
            sets = 1 if n > 1 else max(1, min(64, math.ceil(4 * l2 / max(nbytes, 1))))
            try:
                ks = [rand((B, KV, T, hd), dt) for _ in range(sets)]
                vs = [rand((B, KV, T, hd), dt) for _ in range(sets)]
                masks = [None] * sets
                if n == 1:
                    q = rand((B, KV, G, hd), dt)
                    if s["bias"]:
                        # Materialised per query head (group x the degrees' bytes, 3% of
                        # K+V at head_dim 128): the efficient kernel wants a dense mask.
                        masks = [torch.log(rand((B, KV, 1, T), torch.float32, 1.0, 8.0)).to(dt)
                                 .expand(B, KV, G, T).contiguous() for _ in range(sets)]
                    kw = {}
                else:
                    q = rand((B, H, n, hd), dt)
                    kw = {"enable_gqa": True}
                    if s["bias"]:
                        causal = torch.full((n, T), float("-inf"), device=dev).triu(T - n + 1)
                        masks = [(torch.log(rand((B, KV, 1, 1, T), torch.float32, 1.0, 8.0))
                                  .expand(B, KV, G, 1, T).reshape(B, H, 1, T) + causal).to(dt)
                                 for _ in range(sets)]
                    else:
                        kw["is_causal"] = True

                def call(i):
                    return F.scaled_dot_product_attention(q, ks[i % sets], vs[i % sets],
                                                          attn_mask=masks[i % sets], **kw)

                backend = None
                for name, be in order:
                    try:
                        with sdpa_kernel([be]):
                            call(0)
                            torch.cuda.synchronize()
                        backend = (name, be)
                        break
                    except RuntimeError:
                        continue
                if backend is None:
                    row["note"] = "no SDPA backend ran this shape"
                    out.append(row)
                    continue
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                times = []
                # As ckv: a prefill gets at most 2 warm-up and 10 timed runs.
                warmup = min(a.warmup, 2) if n > 1 else a.warmup
                repeats = min(a.repeats, 10) if n > 1 else a.repeats
                with sdpa_kernel([backend[1]]):
                    for r in range(warmup + repeats):
                        start.record()
                        call(r)
                        stop.record()
                        stop.synchronize()
                        if r >= warmup:
                            times.append(start.elapsed_time(stop) * 1e3)
                    marks = [torch.cuda.Event(enable_timing=True)
                             for _ in range(warmup + repeats + 1)]
                    marks[0].record()
                    for r in range(warmup + repeats):
                        call(r)
                        marks[r + 1].record()
                    marks[-1].synchronize()
                    stream = [marks[r].elapsed_time(marks[r + 1]) * 1e3
                              for r in range(warmup, warmup + repeats)]
                times.sort()
                med = median(times)
                row.update(backend=backend[0], median_us=med, min_us=times[0], max_us=times[-1],
                           stream_us=median(stream),
                           runs=len(times), input_sets=sets, gbps=nbytes / med / 1e3,
                           pct_copy=100 * nbytes / (med * 1e-6) / a.copy_bps,
                           tflops=flops / med / 1e6,
                           pct_matmul=100 * flops / (med * 1e-6) / MATMUL_FLOPS)
            except torch.OutOfMemoryError as e:
                row["note"] = f"out of GPU memory: {str(e).splitlines()[0]}"
            finally:
                ks = vs = masks = q = None
                torch.cuda.empty_cache()
            out.append(row)
            print(f"sdpa {s['kind']} B {B} group {G} hd {hd} ctx {T} bias {s['bias']} {dname}: "
                  f"{row['median_us']} us ({row['backend'] or row['note']})", file=sys.stderr)

    print(f"device: {props.name}; torch {torch.__version__}")
    print(f"{'kind':7} {'B':>3} {'KV':>3} {'grp':>3} {'hd':>3} {'ctx':>7} {'q':>6} {'bias':>4} "
          f"{'dtype':>5} {'backend':>9} {'median us':>10} {'min us':>10} {'max us':>10} "
          f"{'b2b us':>10} "
          f"{'MB read':>9} {'GB/s':>7} {'%copy':>6} {'TFLOP/s':>8} {'%mm':>5}")
    for r in out:
        bias = "on" if r["bias"] else "off"
        print(f"{r['kind']:7} {r['batch']:3d} {r['kv_heads']:3d} {r['group']:3d} "
              f"{r['head_dim']:3d} {r['context']:7d} {r['queries']:6d} {bias:>4} "
              f"{r['dtype']:>5} {r['backend'] or '-':>9} {fmt(r['median_us'], '10.1f')} "
              f"{fmt(r['min_us'], '10.1f')} {fmt(r['max_us'], '10.1f')} "
              f"{fmt(r['stream_us'], '10.1f')} "
              f"{r['bytes'] / 1e6:9.1f} {fmt(r['gbps'], '7.0f')} {fmt(r['pct_copy'], '6.1f')} "
              f"{fmt(r['tflops'], '8.2f')} {fmt(r['pct_matmul'], '5.1f')} {r['note']}")
    write(out, FIELDS, a.json, a.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
