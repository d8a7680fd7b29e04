"""A published run logged to an MLflow tracking server (README, MLflow).

Owns where a run is logged (target.py, no MLflow import: the preflight and the parameters use
it), how judgeflow's metric names become legal MLflow names (names.py), what a run looks like
in MLflow (record.py), the logging itself (log.py) and the verdicts attached to the rows'
traces (assessments.py): the only modules that import mlflow, and only when a run asks for it
(judgeflow works without the `mlflow` extra); and the MLflow run's link written back into the
published report and manifest (report_link.py).
"""
