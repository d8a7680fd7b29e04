"""The published names read back: which judge, metric and area a published field belongs to.

metric_fields.py is the one reader (judges/result_names.py the one writer). A bottom package:
flows/ and every tasks/ package read names through it. May import judges/ top-level modules
and judges/builtin.
"""
