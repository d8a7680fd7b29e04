"""What planning reads of a set: set_summary.py counts the inputs every row has, as it is read.

May import judges/ top-level modules (not the plan) and judges/builtin, whose judges and
metrics it asks about each row.
"""
