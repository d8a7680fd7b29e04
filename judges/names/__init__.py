"""The published names read back: which judge, metric and area a published field belongs to.

The one reader (judges/result_names/ is the one writer): metric_fields.py (metrics, rows,
verdicts), calibration_fields.py (a run's calibration) and pairwise_fields.py (a head-to-head's
counts, win rate and length fit). A bottom package: flows/ and every tasks/ package read names
through it. May import judges/ top-level modules, judges/builtin and judges/result_names.
"""
