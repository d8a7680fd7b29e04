"""Reading and checking an evaluation set.

Readers per format (streamed and bounded; a set kept in MLflow comes from tasks/mlflow/read.py
as rows, batched and bounded here like inline rows), Pandera validation, normalisation of
requests and traces, row shapes for planning, the labels join and pair sets. May import
tasks/agents (agent columns, traces), tasks/mlflow (sets kept in MLflow) and judges/; the labels
join reading an earlier run's calibration from tasks/storage is a known exception
(tests/test_structure.py KNOWN_EXCEPTIONS).
"""
