#!/usr/bin/env python3
"""The end-to-end peer of issue 7: Hugging Face transformers `generate` timed
on the GPU machine (torch with CUDA, transformers 5).

No model file is read (the GPU machine has no internet): the model is built
from a LlamaConfig of a shape of src/model_presets.c with random weights, in
bf16 with attn_implementation="sdpa", as `ckv bench decode --synthetic` does.
Every (batch, prompt length) point runs the same call: greedy `generate` with
an all-ones attention mask, cache_implementation="static" and exactly
--new-tokens new tokens (no EOS stop), on the same prompt ids (row i of one
seeded draw, whatever the batch; or of --ids FILE, the prompts `ckv bench
generate` times, one row of whitespace-separated ids per line). A logits processor notes the time
(after a CUDA synchronise) when the first token's logits exist: prefill is
the prompt tokens over that time, decode the new tokens after the first over
the rest of the call. One untimed warm-up call per point first (the static
cache is made, and compiled where transformers compiles it), then medians of
--repeats calls. Points that run out of GPU memory are reported, not fatal.

Usage: hf_generate.py [--shape NAME] [--contexts LIST] [--batches LIST]
                      [--ids FILE] [--json out.json] [--csv out.csv]
--shape tiny --device cpu is a seconds-long check of the script itself.
"""
import argparse
import sys
import time
import warnings

from peer_output import fmt, write
from prompt_ids import read_ids

# layers, hidden, heads, kv heads, head dim, ff, vocab, max positions, rope base, tied
# embeddings: the values of src/model_presets.c (from each model's config.json);
# tiny is only for checking this script on a CPU.
SHAPES = {
    "smollm2-135m": (30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0, True),
    "llama3.1-8b": (32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0, False),
    "tiny": (2, 64, 4, 2, 16, 128, 256, 4096, 10000.0, True),
}
DEFAULT_CONTEXTS = {"llama3.1-8b": "1024,8192,32768"}
FIELDS = ["shape", "batch", "context", "new_tokens", "device", "dtype", "attention", "cache",
          "prefill_ms", "prefill_tok_s", "decode_ms", "decode_tok_s", "ms_per_step", "runs",
          "note"]


def llama_model(shape, positions, new_tokens, device, compile_on=True):
    """The peer: a shape's model with random bf16 weights (drawn from torch's
    current seed), made on `device` (an 8B model in fp32 on the host would
    take minutes), with room for at least `positions` positions; and its
    generation config: greedy, exactly new_tokens tokens, a static cache
    (compiled where transformers compiles it, unless compile_on is false)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    L, E, H, KV, hd, F, V, P, base, tied = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=V, hidden_size=E, intermediate_size=F, num_hidden_layers=L,
                      num_attention_heads=H, num_key_value_heads=KV, head_dim=hd,
                      max_position_embeddings=max(P, positions), rope_theta=base,
                      rms_norm_eps=1e-5, tie_word_embeddings=tied, attn_implementation="sdpa",
                      bos_token_id=None, eos_token_id=None, pad_token_id=0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    gen = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           cache_implementation="static", eos_token_id=None, pad_token_id=0,
                           disable_compile=not compile_on)
    return model, gen


def int_list(s):
    return [int(x) for x in s.split(",") if x]


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    ap.add_argument("--contexts", help="prompt lengths (default 1024; llama3.1-8b "
                    "1024,8192,32768)")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--new-tokens", type=int, default=64,
                    help="tokens generated per sequence (>= 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compile", default="auto", choices=["auto", "off"],
                    help="auto: as transformers does for a static cache; off: never compile")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ids", help="prompt ids: row i of the file is sequence i's prompt "
                    "(whitespace-separated ids, one row per line; default: a seeded draw)")
    ap.add_argument("--json")
    ap.add_argument("--csv")
    a = ap.parse_args()
    if a.new_tokens < 2 or a.repeats < 1:
        ap.error("--new-tokens must be >= 2 and --repeats >= 1")
    contexts = int_list(a.contexts or DEFAULT_CONTEXTS.get(a.shape, "1024"))
    batches = int_list(a.batches)
    vocab = SHAPES[a.shape][6]
    ids_rows = None
    if a.ids:
        try:
            ids_rows = read_ids(a.ids, vocab, max(batches), max(contexts))
        except (OSError, ValueError) as e:  # the caller prints this line as the reason
            print(f"--ids: {e}", file=sys.stderr)
            return 2
    warnings.filterwarnings("ignore")
    try:
        import torch
        import transformers
        from transformers import LogitsProcessor, LogitsProcessorList
    except Exception as e:  # the caller prints this line as the reason
        print(f"torch or transformers is not available: {e}", file=sys.stderr)
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 3
    dev = torch.device(a.device)
    transformers.logging.set_verbosity_error()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    torch.manual_seed(a.seed)
    model, gen = llama_model(a.shape, max(contexts) + a.new_tokens, a.new_tokens, dev,
                             a.compile != "off")
    # One draw of prompts (or the caller's), rows shared by every batch size.
    if ids_rows is not None:
        prompts = torch.tensor(ids_rows, dtype=torch.long)
    else:
        g = torch.Generator().manual_seed(a.seed)
        prompts = torch.randint(0, vocab, (max(batches), max(contexts)), generator=g)

    class FirstLogits(LogitsProcessor):
        """Notes when the first token's logits exist (the prefill's end)."""
        t = None

        def __call__(self, input_ids, scores):
            if self.t is None:
                sync()
                self.t = time.perf_counter()
            return scores

    def call(ids, mask):
        first = FirstLogits()
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen,
                                 logits_processor=LogitsProcessorList([first]))
        sync()
        t1 = time.perf_counter()
        if out.shape[1] != ids.shape[1] + a.new_tokens:
            raise RuntimeError(f"generate made {out.shape[1] - ids.shape[1]} tokens, "
                               f"not {a.new_tokens}")
        return first.t - t0, t1 - first.t

    rows = []
    for T in contexts:
        for B in batches:
            row = dict(shape=a.shape, batch=B, context=T, new_tokens=a.new_tokens,
                       device=a.device, dtype="bf16", attention="sdpa", cache="static",
                       prefill_ms=None, prefill_tok_s=None, decode_ms=None, decode_tok_s=None,
                       ms_per_step=None, runs=0, note="")
            try:
                ids = prompts[:B, :T].to(dev)
                mask = torch.ones_like(ids)
                call(ids, mask)
                times = [call(ids, mask) for _ in range(a.repeats)]
                pre, dec = median([t[0] for t in times]), median([t[1] for t in times])
                row.update(prefill_ms=pre * 1e3, prefill_tok_s=B * T / pre, decode_ms=dec * 1e3,
                           decode_tok_s=B * (a.new_tokens - 1) / dec,
                           ms_per_step=dec * 1e3 / (a.new_tokens - 1), runs=a.repeats)
            except (torch.OutOfMemoryError, RuntimeError) as e:
                # A compiled forward may wrap the OOM in another error.
                if "out of memory" not in str(e):
                    raise
                row["note"] = f"out of GPU memory: {str(e).splitlines()[0][:120]}"
            finally:
                ids = mask = None
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
            print(f"hf {a.shape} B {B} ctx {T}: prefill {row['prefill_tok_s']} tok/s, decode "
                  f"{row['decode_tok_s']} tok/s {row['note']}", file=sys.stderr)

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; transformers {transformers.__version__}; "
          f"{a.shape} with random bf16 weights, sdpa, static cache, {a.new_tokens} new tokens, "
          f"median of {a.repeats}; prompts {'of ' + a.ids if a.ids else 'drawn with the seed'}")
    print(f"{'batch':>5} {'context':>7} {'prefill ms':>11} {'prefill tok/s':>14} "
          f"{'decode ms':>10} {'ms/step':>8} {'decode tok/s':>13}")
    for r in rows:
        print(f"{r['batch']:5d} {r['context']:7d} {fmt(r['prefill_ms'], '11.2f')} "
              f"{fmt(r['prefill_tok_s'], '14.0f')} {fmt(r['decode_ms'], '10.2f')} "
              f"{fmt(r['ms_per_step'], '8.3f')} {fmt(r['decode_tok_s'], '13.0f')} {r['note']}")
    write(rows, FIELDS, a.json, a.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
