"""Scaling a run out over Prefect workers.

The plan of shards, their launch on a deployment's workers, budget shares and liveness, and the
merge of what they stored into one publish. The shard flow itself is flows/shards/flow.py (a
deployment entrypoint). May import flows/run, tasks/ and judges/.
"""
