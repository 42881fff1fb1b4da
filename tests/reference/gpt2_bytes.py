"""GPT-2's byte -> symbol table, as published in openai/gpt-2 encoder.py:
byte-level BPE vocabularies (SmolLM2's included) spell every byte with one of
these symbols. Shared by the checks that decode token ids independently."""


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
