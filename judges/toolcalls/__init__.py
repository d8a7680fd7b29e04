"""Deterministic tool-call judges (issue 25): an agent's calls against the expected calls.

Pure functions over plain data, no model and no I/O: arguments.py compares one call's arguments
(JSON equality, or a rule per argument), metrics.py pairs the calls of a row and gives its
numbers and yes/no verdicts, summary.py aggregates rows over a run. It reads calls as plain
mappings or any object with `name` and `arguments`, so it depends on no trajectory model. May
import judges/ top-level modules that do not import the plan (results.py), never a sub-package,
so that judges/builtin can register these judges without closing a cycle.
"""
