"""scripts/compare-results as a module for the sweep tests: load() and
differences() of results files."""
import importlib.machinery
import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                     "compare-results")
_loader = importlib.machinery.SourceFileLoader("compare_results", _path)
compare = importlib.util.module_from_spec(importlib.util.spec_from_loader("compare_results", _loader))
_loader.exec_module(compare)
