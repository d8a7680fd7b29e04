"""Where a run's files live, and reading them back.

The run's folder and publishing, staged results, the chunk store for resume, shard inputs,
baselines read back and their integrity. Every URL opens through judges/storage.py. May import
judges/, never the engine (judges/engine.py, judges/calls.py): the chunk kinds that judge live
in flows/run.
"""
