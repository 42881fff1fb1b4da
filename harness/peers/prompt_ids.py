"""Prompt token ids in a text file, as `ckv bench generate` writes them for
its peer so that both time the same prompts: one row of whitespace-separated
decimal ids per line, every row the same length. Plain Python (no torch):
the test suite checks the reader without it."""


def read_ids(path, n_vocab, rows, cols):
    """The rows of `path`: at least `rows` rows of at least `cols` ids, each
    in [0, n_vocab). ValueError naming the file, line and value otherwise."""
    out = []
    with open(path, encoding="ascii", errors="replace") as f:
        for line_no, line in enumerate(f, 1):
            words = line.split()
            if not words:
                raise ValueError(f"{path}:{line_no}: empty line (one row of ids per line)")
            row = []
            for w in words:
                if not (w.isascii() and w.isdigit()):
                    raise ValueError(f"{path}:{line_no}: '{w}' is not a token id "
                                     "(a non-negative integer)")
                v = int(w)
                if v >= n_vocab:
                    raise ValueError(f"{path}:{line_no}: token id {v} is outside the "
                                     f"vocabulary (0 .. {n_vocab - 1})")
                row.append(v)
            if out and len(row) != len(out[0]):
                raise ValueError(f"{path}:{line_no}: {len(row)} ids, but line 1 has "
                                 f"{len(out[0])} (every row the same length)")
            out.append(row)
    if len(out) < rows:
        raise ValueError(f"{path}: {len(out)} rows, {rows} needed (the largest batch)")
    if len(out[0]) < cols:
        raise ValueError(f"{path}: {len(out[0])} ids per row, {cols} needed (the longest "
                         "context)")
    return out
