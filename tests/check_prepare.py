#!/usr/bin/env python3
"""`ckv prepare ruler` end to end: help, usage errors (exit 2), missing
model or data (exit 1 with the path), and a small run whose jsonl is read
back with Python's json and checked against RULER's official format, and
whose task pack is read with h5py: its token ids, decoded with the GGUF
vocabulary read by gguf-py (GPT-2 byte-level symbols), must spell the
prompt exactly, split at the context boundary.

Uses numpy, h5py and gguf. The ckv binary comes from $CKV; the model
from $CKV_MODEL or models/ under $CKV_SOURCE_ROOT; data from $CKV_DATA_DIR or
../shared/data beside the source tree (exit 77, skipped, when absent)."""
import json
import os
import subprocess
import sys
import tempfile

import h5py
from gguf import GGUFReader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from gpt2_bytes import bytes_to_unicode  # noqa: E402

CKV = os.environ.get("CKV", "build/ckv")
ROOT = os.environ.get("CKV_SOURCE_ROOT", ".")
MODEL = os.environ.get("CKV_MODEL") or os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
DATA = os.environ.get("CKV_DATA_DIR") or os.path.join(ROOT, "../shared/data")
failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def decoder():
    r = GGUFReader(MODEL)
    check(r.fields["tokenizer.ggml.model"].contents() == "gpt2", "default model is byte-level BPE")
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    inv = {c: b for b, c in bytes_to_unicode().items()}
    return lambda ids: b"".join(bytes(inv[ch] for ch in toks[i]) for i in ids)


def check_pack(path, lines):
    decode = decoder()
    with h5py.File(path, "r") as f:
        check(f.attrs["format"] == "ckv-pack" and f.attrs["version"] == 2, "pack format attrs")
        check(f.attrs["model_path"] == MODEL, "pack records the model path")
        check(f.attrs["tokenizer_hash"] != 0, "pack records a tokenizer hash")
        g = f["samples"]
        n = len(g["task"])
        check(n == len(lines), f"pack holds every jsonl sample ({n} vs {len(lines)})")
        tokens, answers = f["tokens"][:], [a.decode() for a in f["answers"][:]]
        prompts = f["prompts"][:].tobytes()
        t = a = b = 0
        for i in range(n):
            o = lines[i]
            task = g["task"][i].decode()
            pl = int(g["prompt_len"][i])
            prompt = prompts[b:b + pl].decode()
            b += pl
            prefix = g["answer_prefix"][i].decode()
            nt, nc, na = int(g["n_tokens"][i]), int(g["n_context_tokens"][i]), int(g["n_answers"][i])
            cc = int(g["context_chars"][i])
            check(task == o["task"] and prompt == o["input"] and prefix == o["answer_prefix"],
                  f"pack sample {i} matches the jsonl")
            check(answers[a:a + na] == o["outputs"], f"pack answers {i}")
            want_metric = "string_match_part" if task.startswith("qa") else "string_match_all"
            check(g["metric"][i].decode() == want_metric, f"{task}: metric")
            ids = tokens[t:t + nt]
            pb = prompt.encode()
            check(decode(ids[:nc]) == pb[:cc], f"{task} {i}: context tokens spell the context")
            check(decode(ids[nc:]) == pb[cc:] + prefix.encode(),
                  f"{task} {i}: question tokens spell the question and answer prefix")
            check(abs(nt - (o["length"] - int(g["max_new_tokens"][i]))) <= 2,
                  f"{task} {i}: split tokenization within 2 tokens of the whole prompt's")
            t += nt
            a += na
        check(t == len(tokens) and a == len(answers) and b == len(prompts),
              "pack has no leftover tokens, answers or prompt bytes")


def run(*args):
    p = subprocess.run([CKV, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    if not os.path.exists(MODEL) or not os.path.exists(os.path.join(DATA, "ruler/templates.json")):
        print("skipped: model or data absent", MODEL, DATA)
        return 77
    rc, out, _ = run("prepare", "ruler", "--help")
    check(rc == 0, "prepare ruler --help exits 0")
    for opt in ("--model", "--tasks", "--lengths", "--samples", "--seed", "--data-dir", "--jsonl"):
        check(opt in out, f"--help documents {opt}")
    rc, out, _ = run("prepare", "--help")
    check(rc == 0 and "ruler" in out, "prepare --help lists ruler")

    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "r.jsonl")
        base = ["prepare", "ruler", "--model", MODEL, "--data-dir", DATA]
        usage = [
            (["--tasks", "bogus", "--jsonl", out_path], "unknown task 'bogus'"),
            (["--lengths", "12", "--jsonl", out_path], "--lengths"),
            (["--lengths", "4096,x", "--jsonl", out_path], "--lengths"),
            (["--samples", "0", "--jsonl", out_path], "--samples"),
            (["--seed", "-1", "--jsonl", out_path], "--seed"),
            ([], "an output is required"),
            (["--jsonl", out_path, "extra"], "unexpected argument"),
        ]
        for extra, msg in usage:
            rc, _, err = run(*base, *extra)
            check(rc == 2 and msg in err, f"{extra}: exit 2 with '{msg}' (got {rc}: {err.strip()})")
        rc, _, err = run("prepare", "bogus")
        check(rc == 2 and "unknown kind" in err, "unknown prepare kind is a usage error")

        rc, _, err = run("prepare", "ruler", "--model", os.path.join(tmp, "none.gguf"),
                         "--data-dir", DATA, "--jsonl", out_path)
        check(rc == 1 and "none.gguf" in err, f"missing model names the file (got {rc}: {err})")
        rc, _, err = run("prepare", "ruler", "--model", MODEL, "--data-dir", tmp,
                         "--jsonl", out_path)
        check(rc == 1 and "templates.json" in err, f"missing templates name the file ({err})")
        check(not os.path.exists(out_path), "no output file after a failure")

        pack_path = os.path.join(tmp, "r.h5")
        rc, out, err = run(*base, "--tasks", "niah_single_1,qa_2,fwe,qa_1", "--lengths", "2048,3000",
                           "--samples", "2", "--seed", "7", "--jsonl", out_path, "--out", pack_path)
        check(rc == 0, f"small run exits 0 ({err})")
        check("skipped qa_2 at 2048" in err and "hotpot" in err.lower() or
              os.path.exists(os.path.join(DATA, "hotpotqa")), "qa_2 reported as skipped")
        lines = [json.loads(l) for l in open(out_path, encoding="utf-8")]
        check(len(lines) in (12, 16), f"2 samples x tasks x 2 lengths ({len(lines)})")
        for raw_line in open(out_path, encoding="utf-8"):
            # RULER writes with json.dump(ensure_ascii=True): same bytes
            check(json.dumps(json.loads(raw_line)) + "\n" == raw_line,
                  "jsonl line is byte-identical to Python's json.dumps")
        keys = ["index", "input", "outputs", "length", "length_w_model_temp", "answer_prefix",
                "task", "max_seq_length"]
        for o in lines:
            check(list(o) == keys, f"keys in RULER's order: {list(o)}")
            check(o["length"] <= o["max_seq_length"], f"{o['task']}: {o['length']} within target")
            check(o["index"] in (0, 1), "index is the sample number")
            if o["task"] == "niah_single_1":
                check(o["answer_prefix"].startswith(" The special magic number for "),
                      "niah answer prefix")
                check(f"is: {o['outputs'][0]}." in o["input"], "the needle's value is in the input")
            if o["task"] == "fwe":
                check(len(o["outputs"]) == 3, "fwe has three answers")
        check_pack(pack_path, lines)
        raw = open(out_path, "rb").read()
        check(all(b < 0x80 for b in raw), "non-ASCII escaped as json.dump does")
        # same seed, same file
        again = os.path.join(tmp, "again.jsonl")
        run(*base, "--tasks", "niah_single_1,qa_2,fwe,qa_1", "--lengths", "2048,3000",
            "--samples", "2", "--seed", "7", "--jsonl", again)
        check(open(again, "rb").read() == raw, "same seed, identical jsonl")
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
