"""A published run logged to an MLflow tracking server (README, MLflow).

Owns where a run is logged (target.py, no MLflow import: the preflight and the parameters use
it), how judgeflow's metric names become legal MLflow names (names.py), what a run looks like
in MLflow (record.py) and the logging itself (log.py, the only module that imports mlflow, and
only when a run asks for it: judgeflow works without the `mlflow` extra).
"""
