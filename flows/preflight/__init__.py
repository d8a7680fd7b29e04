"""What is checked before anything is judged, each refusal one sentence.

Models, keys and endpoints, the output location, the set, the gates, and the operator's policy
for a deployment run's parameters (trust.py). May import the flows' parameter models,
flows/run, tasks/ and judges/ (the doors: tests/test_structure.py DOORS).
"""

from flows.preflight.file_roots import install as _confine_local_files

# Before any flow opens a file: every flow imports this package (guard_parameters).
_confine_local_files()
