#!/usr/bin/env python3
"""Checks harness/peers/prompt_ids.py, the reader of the prompt ids `ckv bench
generate` hands to the transformers peer: the rows it returns are the file's
numbers, and every malformed file is refused with its name, line and value.
Plain Python (the reader needs no torch)."""
import os
import sys
import tempfile

from script_check import check, finish, root

sys.path.insert(0, os.path.join(root, "harness", "peers"))
from prompt_ids import read_ids  # noqa: E402


def refused(text, n_vocab, rows, cols, *needles):
    """read_ids on `text` raises ValueError whose message has every needle."""
    path = os.path.join(tmp, "ids.txt")
    with open(path, "w") as f:
        f.write(text)
    try:
        read_ids(path, n_vocab, rows, cols)
    except ValueError as e:
        return all(n in str(e) for n in needles + (path,))
    return False


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "good.txt")
    with open(path, "w") as f:
        f.write("5 0 255 17\n\t3  9 1 254 \n200 100 50 25\n")
    rows = read_ids(path, 256, 2, 3)
    check(rows == [[5, 0, 255, 17], [3, 9, 1, 254], [200, 100, 50, 25]],
          "rows are the file's numbers, tabs and double spaces between them")
    check(refused("1 2 3\n4 x 6\n", 256, 1, 1, ":2:", "'x'"), "a word is refused, naming line 2")
    check(refused("1 2 -3\n", 256, 1, 1, ":1:", "'-3'"), "a negative id is refused")
    check(refused("1 2.5\n", 256, 1, 1, "'2.5'"), "a fraction is refused")
    check(refused("1 2\n3 256\n", 256, 1, 1, ":2:", "256", "0 .. 255"),
          "an id past the vocabulary is refused with the range")
    check(refused("1 2\n3 4 5\n", 256, 1, 1, ":2:", "3 ids", "2"),
          "rows of different lengths are refused")
    check(refused("1 2\n\n3 4\n", 256, 1, 1, ":2:", "empty"), "an empty line is refused")
    check(refused("1 2\n3 4\n", 256, 3, 1, "2 rows", "3 needed"),
          "fewer rows than the largest batch are refused")
    check(refused("1 2\n3 4\n", 256, 1, 4, "2 ids per row", "4 needed"),
          "rows shorter than the longest context are refused")
    check(refused("", 256, 1, 1, "0 rows"), "an empty file is refused")
    check(refused("1 \u00b2\n", 256, 1, 1, ":1:"), "a non-ASCII digit is refused")
    try:
        read_ids(os.path.join(tmp, "missing.txt"), 256, 1, 1)
        check(False, "a missing file raises OSError")
    except OSError as e:
        check("missing.txt" in str(e), "a missing file raises OSError naming it")

finish()
