"""The phases of a run, as plain functions over typed values.

Prepare (load, validate, plan), generate, judge, calibrate, compare with a baseline, judge head
to head, assess completeness, build the manifest. The flows at flows/ only sequence them. May
import the flows' parameter models, flows/run, flows/preflight, flows/shards, tasks/ and judges/
(the doors: tests/test_structure.py DOORS).
"""
