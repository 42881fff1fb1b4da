#!/usr/bin/env python3
"""Builds the data dir's ruler/templates.json from RULER's own files (used by
datasets/fetch): the task types' templates, answer prefixes and tokens to
generate (scripts/data/synthetic/constants.py), the 13 tasks' arguments
(scripts/synthetic.yaml) and each task type's metric
(scripts/eval/synthetic/constants.py). The Python files are read with ast,
never executed; the YAML (two levels of `key: value`) is read by a small
strict parser so that no YAML package is needed.

usage: ruler_templates.py CONSTANTS_PY SYNTHETIC_YAML EVAL_CONSTANTS_PY OUT_JSON"""
import ast
import json
import sys


def tasks_dict(path):
    """The TASKS = {...} assignment of a Python file, as a syntax tree."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "TASKS" for t in node.targets):
            return node.value
    sys.exit(f"{path}: no TASKS assignment")


def scalar(s):
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def read_yaml(path):
    out, task, section = {}, None, None
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        if not sep:
            sys.exit(f"{path}:{n}: expected 'key: value'")
        value = value.strip()
        if indent == 0 and not value:
            task = out[key] = {}
        elif indent == 2 and task is not None and key == "task":
            task["task"] = value
        elif indent == 2 and task is not None and key == "args" and not value:
            section = task["args"] = {}
        elif indent == 4 and section is not None:
            section[key] = scalar(value)
        else:
            sys.exit(f"{path}:{n}: unexpected line")
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.rsplit("\n\n", 1)[1])
    types = ast.literal_eval(tasks_dict(sys.argv[1]))
    metrics = {}
    node = tasks_dict(sys.argv[3])
    for k, v in zip(node.keys, node.values):
        fn = dict(zip([ast.literal_eval(x) for x in v.keys], v.values))["metric_fn"]
        metrics[ast.literal_eval(k)] = fn.id
    out = {
        "source": "NVIDIA/RULER scripts/data/synthetic/constants.py and scripts/synthetic.yaml "
                  "(as in the public fork Rya-Sanovar/RULER at 99cd4ca, 2024-11-21); strings "
                  "verbatim, typos included",
        "task_types": types,
        "tasks": read_yaml(sys.argv[2]),
        "metric_by_task_type": metrics,
    }
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
