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


def check_refuses_files(run, tmp, ext, empty_says=None):
    """A missing file (missing.EXT in tmp) fails with exit 1 naming it; with
    empty_says, an empty file (empty.EXT) fails with exit 1 saying that."""
    if empty_says is not None:
        empty = os.path.join(tmp, "empty." + ext)
        open(empty, "w").close()
        rc, _, err = run(empty)
        check(rc == 1 and empty_says in err, f"an empty file is refused ({err.strip()})")
    rc, _, err = run(os.path.join(tmp, "missing." + ext))
    check(rc == 1 and "missing." + ext in err, f"a missing file is named ({err.strip()})")


def finish():
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)
