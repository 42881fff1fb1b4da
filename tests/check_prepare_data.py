#!/usr/bin/env python3
"""`ckv prepare` on all the real data of the data dir, read back with h5py:

- every LongBench file in DATA/longbench prepares (`longbench --tasks` with
  every file's name; `--tasks all` reports the absent datasets as skipped;
  `longbench-jsonl` with the other options); each pack sample is checked against the jsonl
  record: LongBench's template filled with Python's str.format, SmolLM2's
  ChatML wrapping (the string transformers' apply_chat_template gives)
  except for the six datasets pred.py leaves raw, answers, classes, the
  eval.py metric name, dataset2maxlen's new tokens, the first-line flag,
  the context/question split, and token ids that spell the prompt (decoded
  with the GGUF vocabulary through gguf-py); truncated prompts keep the
  prompt's head and tail and fit the budget;
- `ckv prepare ruler` of every task at 4096 succeeds with qa_2 reported as
  skipped when HotpotQA is absent, and every other task is in the pack;
- `ckv prepare ruler-jsonl` imports RULER's jsonl: prompt = input +
  answer_prefix, answers = outputs.

The data dir is $CKV_DATA_DIR, else ../shared/data beside the source tree;
unlike the other checks this one FAILS when it is missing (its purpose is
the real data). Uses numpy, h5py and gguf."""
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

# LongBench eval.py dataset2metric and pred.py's lists, copied by hand.
METRIC = {
    "narrativeqa": "qa_f1_score", "qasper": "qa_f1_score", "multifieldqa_en": "qa_f1_score",
    "multifieldqa_zh": "qa_f1_zh_score", "hotpotqa": "qa_f1_score", "2wikimqa": "qa_f1_score",
    "musique": "qa_f1_score", "dureader": "rouge_zh_score", "gov_report": "rouge_score",
    "qmsum": "rouge_score", "multi_news": "rouge_score", "vcsum": "rouge_zh_score",
    "trec": "classification_score", "triviaqa": "qa_f1_score", "samsum": "rouge_score",
    "lsht": "classification_score", "passage_retrieval_en": "retrieval_score",
    "passage_count": "count_score", "passage_retrieval_zh": "retrieval_zh_score",
    "lcc": "code_sim_score", "repobench-p": "code_sim_score",
}
NO_CHAT = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}
FIRST_LINE = {"trec", "triviaqa", "samsum", "lsht"}
# SmolLM2's chat template rendered by transformers (tests/test_tokenizer.c)
CHAT_PRE = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\n")
CHAT_SUF = "<|im_end|>\n<|im_start|>assistant\n"
DROPPED = b""
MAX_LENGTH = 7500  # SmolLM2's 8192-token context: largest multiple of 500 <= 8192 - 512


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def decoder():
    toks = GGUFReader(MODEL).fields["tokenizer.ggml.tokens"].contents()
    inv = {c: b for b, c in bytes_to_unicode().items()}
    return lambda ids: b"".join(bytes(inv[ch] for ch in toks[i]) for i in ids)


def unrepresentable():
    """Bytes without a token in the vocabulary (byte-level BPE drops them,
    as Hugging Face does, so a prompt decoded from tokens lacks them)."""
    toks = set(GGUFReader(MODEL).fields["tokenizer.ggml.tokens"].contents())
    return bytes(b for b, ch in bytes_to_unicode().items() if ch not in toks)


def run(*args):
    p = subprocess.run([CKV, *args], capture_output=True)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def read_pack(path):
    """Samples of a pack as dicts (prompt as bytes)."""
    with h5py.File(path, "r") as f:
        check(f.attrs["format"] == "ckv-pack" and f.attrs["version"] == 2, f"{path}: format")
        g = f["samples"]
        cols = {k: g[k][:] for k in g}
        tokens, prompts = f["tokens"][:], f["prompts"][:].tobytes()
        answers = [a.decode() for a in f["answers"][:]]
        classes = [c.decode() for c in f["classes"][:]]
    out, t, b, a, c = [], 0, 0, 0, 0
    for i in range(len(cols["task"])):
        nt, pl = int(cols["n_tokens"][i]), int(cols["prompt_len"][i])
        na, nc = int(cols["n_answers"][i]), int(cols["n_classes"][i])
        out.append({
            "task": cols["task"][i].decode(), "metric": cols["metric"][i].decode(),
            "index": int(cols["index"][i]), "max_new_tokens": int(cols["max_new_tokens"][i]),
            "target_length": int(cols["target_length"][i]), "length": int(cols["length"][i]),
            "prompt": prompts[b:b + pl], "answer_prefix": cols["answer_prefix"][i].decode(),
            "context_chars": int(cols["context_chars"][i]), "tokens": tokens[t:t + nt],
            "n_context_tokens": int(cols["n_context_tokens"][i]),
            "parse_special": bool(cols["parse_special"][i]),
            "first_line": bool(cols["first_line"][i]),
            "answers": answers[a:a + na], "classes": classes[c:c + nc]})
        t, b, a, c = t + nt, b + pl, a + na, c + nc
    check(t == len(tokens) and b == len(prompts) and a == len(answers) and c == len(classes),
          f"{path}: nothing left over")
    return out


def check_longbench_sample(s, rec, name, templates, maxlen, decode):
    task = rec["dataset"].removesuffix("_e")  # LongBench-E scores as its base dataset
    where = f"{name}:{s['index'] + 1}"
    check(s["task"] == task and s["metric"] == METRIC[task], f"{where}: task and metric")
    check(s["max_new_tokens"] == maxlen[task], f"{where}: max new tokens")
    check(s["first_line"] == (task in FIRST_LINE), f"{where}: first-line flag")
    check(s["parse_special"], f"{where}: special tokens parsed")
    check(s["answers"] == rec["answers"], f"{where}: answers")
    check(s["classes"] == (rec["all_classes"] or []), f"{where}: classes")
    check(s["length"] == rec["length"] and s["target_length"] == MAX_LENGTH, f"{where}: lengths")
    raw = templates[task].format(**rec).encode()
    ctx_end = templates[task].split("{context}")[0].format(**rec).encode() + \
        rec["context"].encode()
    pre, suf = (b"", b"") if task in NO_CHAT else (CHAT_PRE.encode(), CHAT_SUF.encode())
    p = s["prompt"]
    check(p.startswith(pre) and p.endswith(suf), f"{where}: chat format as pred.py's exceptions")
    body = p[len(pre):len(p) - len(suf)]
    ids = s["tokens"]
    check(decode(ids) == p, f"{where}: token ids spell the prompt")
    check(decode(ids[:s["n_context_tokens"]]) == p[:s["context_chars"]],
          f"{where}: context tokens spell the context")
    if body == raw:
        check(s["context_chars"] == len(pre) + len(ctx_end), f"{where}: context split")
    else:
        # middle truncation: the head and tail survive, the budget holds
        # chat affixes are about 30 tokens; re-tokenizing the joined halves may
        # merge across the cut
        check(len(ids) <= MAX_LENGTH + (0 if task in NO_CHAT else 32) + 2,
              f"{where}: truncated prompt within the budget ({len(ids)})")
        kept = raw.translate(None, DROPPED)
        check(kept.startswith(body[:200]) and kept.endswith(body[-200:]),
              f"{where}: truncation keeps the first and last parts")
        q = raw[len(ctx_end):]
        if body.endswith(q):
            check(s["context_chars"] == len(pre) + len(body) - len(q),
                  f"{where}: split kept after truncation")


def check_longbench(tmp, decode):
    cfg = os.path.join(DATA, "longbench/config")
    templates = json.load(open(os.path.join(cfg, "dataset2prompt.json"), encoding="utf-8"))
    maxlen = json.load(open(os.path.join(cfg, "dataset2maxlen.json"), encoding="utf-8"))
    files = sorted(f for f in os.listdir(os.path.join(DATA, "longbench")) if f.endswith(".jsonl"))
    check(len(files) > 0, "LongBench files present")
    # every file of the data dir, named on the command line
    out = os.path.join(tmp, "lb.h5")
    rc, stdout, err = run("prepare", "longbench", "--model", MODEL, "--data-dir", DATA,
                          "--tasks", ",".join(f[:-len(".jsonl")] for f in files), "--out", out)
    if check(rc == 0, f"prepare longbench of every file exits 0 ({err.strip()})"):
        samples = read_pack(out)
        k = 0
        for name in files:
            recs = [json.loads(l) for l in open(os.path.join(DATA, "longbench", name),
                                                 encoding="utf-8") if l.strip()]
            mine = samples[k:k + len(recs)]
            k += len(recs)
            check(len(mine) == len(recs) and all(s["index"] == i for i, s in enumerate(mine)),
                  f"{name}: every record, in order")
            for s, rec in zip(mine, recs):
                check_longbench_sample(s, rec, name, templates, maxlen, decode)
        check(k == len(samples), "the pack holds exactly the files' records")
    # --tasks all: the 21 v1 datasets, absent ones reported
    rc, _, err = run("prepare", "longbench", "--model", MODEL, "--data-dir", DATA, "--samples", "1",
                     "--out", out)
    check(rc == 0, f"prepare longbench --tasks all exits 0 ({err.strip()})")
    for task in METRIC:
        present = os.path.exists(os.path.join(DATA, "longbench", task + ".jsonl"))
        check(present or f"skipped {task}:" in err, f"absent {task} reported as skipped")
    # one file through longbench-jsonl, with the other options
    src = os.path.join(DATA, "longbench", files[0])
    rc, _, err = run("prepare", "longbench-jsonl", "--model", MODEL, "--data-dir", DATA, "--in",
                     src, "--samples", "2", "--no-chat", "--max-length", "1000", "--out", out)
    check(rc == 0, f"longbench-jsonl with --samples/--no-chat/--max-length ({err.strip()})")
    if rc == 0:
        s = read_pack(out)
        check(len(s) == 2 and all(len(x["tokens"]) <= 1002 and x["target_length"] == 1000 and
                                  not x["prompt"].startswith(b"<|im_start|>") for x in s),
              "2 samples within 1000 tokens, no chat format")


def check_ruler(tmp, decode):
    out, jl = os.path.join(tmp, "ruler.h5"), os.path.join(tmp, "ruler.jsonl")
    rc, stdout, err = run("prepare", "ruler", "--model", MODEL, "--data-dir", DATA, "--tasks", "all",
                          "--lengths", "4096", "--samples", "1", "--out", out)
    check(rc == 0, f"prepare ruler of all tasks at 4096 exits 0 ({err.strip()})")
    hotpot = os.path.exists(os.path.join(DATA, "hotpotqa/hotpot_dev_distractor_v1.json"))
    check(hotpot or "skipped qa_2 at 4096" in err, "qa_2 reported as skipped without HotpotQA")
    want = {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
            "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt",
            "cwe", "fwe", "qa_1"} | ({"qa_2"} if hotpot else set())
    if rc == 0:
        samples = read_pack(out)
        check({s["task"] for s in samples} == want, "every task with data is in the pack")
        check(all(len(s["tokens"]) + s["max_new_tokens"] <= 4096 + 2 for s in samples),
              "RULER prompts fit 4096 with their new tokens")
    # RULER's jsonl imported back
    rc, _, err = run("prepare", "ruler", "--model", MODEL, "--data-dir", DATA, "--tasks",
                     "niah_multikey_1", "--samples", "2", "--jsonl", jl)
    check(rc == 0, f"ruler --jsonl ({err.strip()})")
    rc, _, err = run("prepare", "ruler-jsonl", "--model", MODEL, "--data-dir", DATA, "--in", jl,
                     "--task", "niah_multikey_1", "--out", out)
    check(rc == 0, f"prepare ruler-jsonl exits 0 ({err.strip()})")
    if rc == 0:
        lines = [json.loads(l) for l in open(jl, encoding="utf-8")]
        samples = read_pack(out)
        check(len(samples) == 2, "ruler-jsonl: both lines")
        for s, o in zip(samples, lines):
            check(s["prompt"] == (o["input"] + o["answer_prefix"]).encode(),
                  "ruler-jsonl prompt is input + answer_prefix")
            check(s["answers"] == o["outputs"] and s["metric"] == "string_match_all" and
                  s["max_new_tokens"] == 128 and not s["first_line"], "ruler-jsonl facts")
            check(decode(s["tokens"]) == s["prompt"], "ruler-jsonl tokens spell the prompt")
            check(s["prompt"][s["context_chars"]:].startswith(b"What are all the special magic")
                  or s["prompt"][s["context_chars"]:].startswith(b"What is the special magic"),
                  "ruler-jsonl question starts at RULER's question")


def check_usage(tmp):
    out = os.path.join(tmp, "u.h5")
    for args, msg in [
        (["longbench", "--tasks", "bogus", "--out", out], "unknown LongBench dataset 'bogus'"),
        (["longbench"], "an output is required"),
        (["longbench", "--in", "x", "--out", out], "does not apply"),
        (["ruler-jsonl", "--out", out], "an input is required"),
        (["ruler-jsonl", "--in", "x", "--max-length", "100", "--out", out], "does not apply"),
        (["longbench-jsonl", "--in", "x", "--task", "nope", "--out", out], "unknown LongBench"),
        (["longbench", "--max-length", "0", "--out", out], "--max-length"),
        (["bogus"], "unknown kind"),
    ]:
        rc, _, err = run("prepare", *args)
        check(rc == 2 and msg in err, f"prepare {args}: exit 2 with '{msg}' ({rc}: {err.strip()})")
    for kind, opts in [("longbench", ["--tasks", "--max-length", "--no-chat", "--samples"]),
                       ("longbench-jsonl", ["--in", "--task", "--max-length"]),
                       ("ruler-jsonl", ["--in", "--task", "--samples"])]:
        rc, stdout, _ = run("prepare", kind, "--help")
        check(rc == 0 and all(o in stdout for o in opts + ["--model", "--data-dir", "--out"]),
              f"prepare {kind} --help documents its options")
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"input": "q"}\n')
    rc, _, err = run("prepare", "longbench-jsonl", "--model", MODEL, "--data-dir", DATA, "--in",
                     bad, "--out", out)
    check(rc == 1 and "bad.jsonl:1" in err, f"bad record names file:line ({err.strip()})")
    check(not os.path.exists(out), "no pack after a failure")


def main():
    if not os.path.isdir(DATA):
        print(f"FAIL: data dir {DATA} missing: set CKV_DATA_DIR")
        return 1
    decode = decoder()
    global DROPPED
    DROPPED = unrepresentable()
    with tempfile.TemporaryDirectory() as tmp:
        check_usage(tmp)
        check_longbench(tmp, decode)
        check_ruler(tmp, decode)
    print(f"{checks[0]} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
