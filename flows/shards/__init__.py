"""Scaling a run out over Prefect workers.

The plan of shards, their launch on a deployment's workers, budget shares and liveness, and the
merge of what they stored into one publish. The shard flow itself is flows/shards/flow.py (a
deployment entrypoint, which guards its parameters with flows/preflight/trust.py). May import
the flows' parameter models, flows/run, flows/preflight, tasks/ and judges/ (the doors:
tests/test_structure.py DOORS).
"""
