"""What the checks of the repo's scripts share (imported by tests/check_*.py,
not a test itself): the source root, a verdict a line, running a script under
this Python, and the count of failures that ends the run."""
import os
import subprocess
import sys

root = os.environ.get("CKV_SOURCE_ROOT",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run_script(script, *args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def finish():
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)
