#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer_strings.txt: reference token ids for the
default model (SmolLM2-135M-Instruct GGUF) from Hugging Face `tokenizers`.

Run once, outside the test suite (needs `gguf`, `tokenizers`, `transformers`):
    python3 tests/reference/make_tokenizer_fixture.py MODEL.gguf tests/fixtures/tokenizer_strings.txt

The reference tokenizer is built from the GGUF's own vocabulary and merges
with the pipeline of SmolLM2's tokenizer.json: pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)],
BPE model, the 17 control tokens as special added tokens. The ids are also
checked against transformers' own GGUF conversion (which omits the Digits
stage) and the differing strings are reported.

The same vocabulary and merges are also run with the pre-tokenizers of the
other supported tokenizer.ggml.pre values, as their tokenizer.json files
define them: gpt2 (ByteLevel with its regex), qwen2 and llama-bpe
(Split(regex, isolated) then ByteLevel without regex), so that each regex is
checked against Hugging Face's (Oniguruma) matching.

Output, one case per line, TAB-separated: hex(UTF-8 text); smollm ids with
special tokens parsed; smollm ids with special tokens encoded as text; then
gpt2, qwen2 and llama-bpe ids with special tokens parsed (ids
space-separated, "-" when empty). Lines starting with '#' are comments.
"""
import random
import sys
import unicodedata

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers


GPT2_PRE = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_BPE = QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")


def regex_pre(pattern):
    """Qwen2 / Llama 3 tokenizer.json: Split(regex, isolated), then ByteLevel without its regex."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])


PRE = {
    "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), GPT2_PRE]),
    "gpt2": GPT2_PRE,
    "qwen2": regex_pre(QWEN2),
    "llama-bpe": regex_pre(LLAMA_BPE),
}


def gguf_tokenizer(path, pre="smollm"):
    r = GGUFReader(path)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
              for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
             for i in f["tokenizer.ggml.token_type"].data]
    merges = [tuple(bytes(f["tokenizer.ggml.merges"].parts[i]).decode("utf-8").split(" "))
              for i in f["tokenizer.ggml.merges"].data]
    assert bytes(f["tokenizer.ggml.pre"].parts[-1]).decode() == "smollm"
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = PRE[pre]
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def cases():
    out = []
    # Code
    out += [
        "int main(void) {\n\treturn 0;\n}\n",
        "#include <stdio.h>\nint main(int argc, char **argv)\n{\n    printf(\"%d\\n\", argc);\n}",
        "def f(x):\n    if x > 0:\n        return x ** 2\n    return -x\n",
        "class A:\n\tdef __init__(self):\n\t\tself.x = [1, 2, 3]\n",
        "for (size_t i = 0; i < n; i++) a[i] += b[i] * 2.5f;",
        "    indented four\n        eight\n\t\ttwo tabs\n",
        "x=lambda a,b:a+b;print(x(1,2))",
        "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
        "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
        "fn main() { let v: Vec<u8> = vec![0xff, 0x00]; }",
        "if (a && b || !c) { x <<= 2; y >>= 3; z ^= ~w; }",
        "    ",
        "\t",
        "{\"key\": [1, 2.5, null, true], \"s\": \"\\u00e9\"}",
        "// comment\n/* block */\n#define MAX(a, b) ((a) > (b) ? (a) : (b))",
        "$ ls -la /usr/bin | grep -E '^d' > out.txt 2>&1",
        "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n",
        "    return {k: v for k, v in d.items() if v is not None}\n\n\n",
    ]
    # Numbers
    out += [
        "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-0.5e-10",
        "1,000,000", "1.000.000,50", "$1,234.56", "50%", "2024-06-13", "12:34:56",
        "version 1.2.3-rc4", "0x7fffffff", "1e100", "+44 20 7946 0958", "3/4 cup",
        "The year 1999 and 2000.", "a1b2c3", "99 bottles", "x²+y²=z²", "½ ⅓ ¼",
        "٠١٢٣٤٥٦٧٨٩", "१२३", "Ⅻ Ⅳ", "①②③", "１２３",
    ]
    # Scripts
    out += [
        "日本語のテキストです。", "中文分词测试，包括标点符号！", "한국어 문장입니다.",
        "Привет, мир! Как дела?", "Ελληνικά γράμματα", "مرحبا بالعالم", "नमस्ते दुनिया",
        "שלום עולם", "ไทยภาษา", "Tiếng Việt có dấu", "Zażółć gęślą jaźń",
        "Ærøskøbing Smørrebrød", "Straße groß ẞ", "İstanbul ılık", "ქართული",
        "Հայերեն", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙", "mixed 日本 and English",
        "漢字" * 40,
    ]
    # Emoji
    out += [
        "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪🇫🇷", "I ❤️ 🍕!", "😀😀😀 😂",
        "emoji at end 🎉", "🧑🏿‍💻 codes", "*️⃣ #️⃣ 1️⃣",
    ]
    # Whitespace
    out += [
        " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\t\t", " \t \n ",
        " leading", "  two leading", "trailing ", "trailing  ", "both  ", "a\nb", "a\n b",
        "a \nb", "a\n\nb", "a\n\n\nb", "word\n", "\nword", "\n word", "\tword", " \tword",
        "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a \t b", "line1\r\nline2\r\n",
        "end with newline\n", "x\u00a0y", "x\u3000y", "x\u2003y", "x\u0085y", "x\u2028y",
        "x\u200by", "x\ufeffy", "x\u000by\u000cz", " \u00a0 ", "\u3000\u3000",
        "\u1680x", "x\u180ey", "x\u2000\u200ay", "x\u202fy\u205fz", "x\x1cy\x1dz\x1e\x1f",
        "a\r\n\r\nb", "a\r\rb", "x \r\n y", "a\n\r\n b",
        "spaces before punct  !", "  \n  \n", "   \n\n   x",
    ]
    # Contractions and case
    out += [
        "it's", "they're", "we've", "I'm", "you'll", "he'd", "don't", "IT'S", "THEY'RE",
        "WE'LL", "I'M", "She'S", "'s", "'t", " 's", "rock'n'roll", "o'clock", "’s curly",
        "can't won't shouldn't", "'''triple'''", "''", "it''s",
    ]
    # URLs, mail, paths
    out += [
        "https://example.com/path?q=1&r=2#frag", "http://localhost:8080/",
        "user.name+tag@example.co.uk", "C:\\Users\\name\\file.txt", "/usr/local/lib/libx.so.1",
        "www.hugging-face.co", "ftp://a.b/c_d-e.f", "git@github.com:org/repo.git",
    ]
    # Special-token strings inside text
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
                "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
                "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
                "<jupyter_output>", "<jupyter_script>", "<empty_output>"]
    out += specials
    out += [
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "text<|endoftext|>more", " <|im_end|> ", "<|im_start|><|im_end|>", "<|im_start",
        "|im_end|>", "<|im_end|", "<<|im_end|>>", "<|endoftext|><|endoftext|>",
        "a<filename>b<file_sep>c", "<|IM_END|>", "<|im_end|>\n\n", "\n<|im_start|>",
        "<reponame><repo_name>",
    ]
    # Accents: NFC vs NFD
    for w in ["café", "naïve", "résumé", "Ångström", "über", "niño", "façade", "Ñandú"]:
        out.append(unicodedata.normalize("NFC", w))
        out.append(unicodedata.normalize("NFD", w))
    out += ["e\u0301", "a\u0300\u0301\u0302", "Z\u0351\u0352\u0353\u0354 zalgo"]
    # Long words and repetitions
    out += [
        "Pneumonoultramicroscopicsilicovolcanoconiosis",
        "Donaudampfschifffahrtsgesellschaftskapitän",
        "a" * 300, "ab" * 150, " " * 100, "\n" * 50, "!" * 64, "=" * 80, "-" * 33,
        "antidisestablishmentarianism" * 5, "x" * 1000 + " y",
        "supercalifragilisticexpialidocious",
    ]
    # Punctuation and control characters
    out += [
        "Hello, world!", "Wait... what?!", "«quoted» „German“ “English”", "—em–en‐dash",
        "(a) [b] {c} <d>", "~`!@#$%^&*()_+-=[]{}|;':\",./<>?", "a\x00b", "\x00", "\x00\x00 x",
        "\x01\x02\x1f\x7f", "bell\x07", "tab\tand\x0bvt", "semi;colon:colon", "…", "•·°",
        "™©®", "∑∫√∞≠≤≥", "→←↑↓", "\U0010fffd", "\ufffd", "a\ufffdb",
        # Bytes the SmolLM2 vocabulary has no token for (dropped by Hugging Face)
        "a\x04b", "x\x13\x14y", "\x1d", "\x06\x16", "a\U00040000b", "\U00080000",
    ]
    # Natural prose
    out += [
        "The quick brown fox jumps over the lazy dog.",
        "In 2023, the company reported revenue of $4.5 billion, up 12% year over year.",
        "Dr. Smith's patients (n=42) showed a 3.5-fold increase.",
        "She said: \"I'll be there at 5 p.m.\"",
        "Q: What is 2+2?\nA: 4",
        "Once upon a time,\nthere was a princess.\n\nThe End.",
        "The passkey is 71432. Remember it. 71432 is the passkey.",
        "One of the special magic numbers for abundant-crow is: 1234567.",
        "HELLO WORLD", "Hello World", "hELLO wORLD", "CamelCaseIdentifier", "snake_case_name",
        "kebab-case-name", "SCREAMING_SNAKE", "MiXeD 123 CaSe!",
    ]
    # Seeded combinations of the pieces above
    rng = random.Random(20250613)
    base = list(out)
    for _ in range(60):
        k = rng.randint(2, 5)
        sep = rng.choice(["", " ", "\n", "  ", "\t", " \n"])
        out.append(sep.join(rng.choice(base) for _ in range(k)))
    return out


def main():
    model, dest = sys.argv[1], sys.argv[2]
    tok = gguf_tokenizer(model)
    others = [gguf_tokenizer(model, pre) for pre in ("gpt2", "qwen2", "llama-bpe")]
    strings = cases()
    assert len(set(strings)) >= 200, len(set(strings))
    seen = set()
    lines = ["# hex(UTF-8 text)\tsmollm ids(parse_special)\tsmollm ids(special as text)"
             "\tgpt2\tqwen2\tllama-bpe; from tests/reference/make_tokenizer_fixture.py"]
    for s in strings:
        if s in seen:
            continue
        seen.add(s)
        tok.encode_special_tokens = False
        sp = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ns = tok.encode(s, add_special_tokens=False).ids
        fmt = lambda ids: " ".join(map(str, ids)) if ids else "-"
        rest = [fmt(o.encode(s, add_special_tokens=False).ids) for o in others]
        lines.append("\t".join([s.encode("utf-8").hex(), fmt(sp), fmt(ns)] + rest))
    with open(dest, "w") as fp:
        fp.write("\n".join(lines) + "\n")
    print(f"{len(seen)} strings -> {dest}")

    # Cross-check with transformers' independent GGUF conversion.
    import os
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(model)),
                                       gguf_file=os.path.basename(model))
    tok.encode_special_tokens = False
    diff = [s for s in seen if hf(s, add_special_tokens=False).input_ids
            != tok.encode(s, add_special_tokens=False).ids]
    print(f"transformers GGUF conversion differs on {len(diff)}: {diff!r}")
    for msgs in ([{"role": "user", "content": "What is the capital of France?"}],
                 [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi"}]):
        print(repr(hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)))


if __name__ == "__main__":
    main()
