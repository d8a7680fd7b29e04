"""judgeflow and MLflow (a server, a local store, Databricks): runs logged, sets read from it.

Logging (docs/mlflow.md) owns where a run is logged (target.py, and stores.py for the kind of
store a tracking URI names; no MLflow import: the preflight and the parameters use them), how
judgeflow's metric names become legal MLflow names (names.py),
what a run looks like in MLflow (record.py), the logging itself (log.py), the verdicts attached
to the rows' traces (assessments.py) and the MLflow run's link written back into the published
report and manifest (report_link.py). Reading (docs/input.md, "From MLflow") owns the `mlflow:`
sources (source.py, no MLflow import), traces and dataset records as rows (rows.py, pure) and
the paged reading (read.py). log.py, assessments.py and read.py are the only modules that
import mlflow, and only when a run asks for it: judgeflow works without the `mlflow` extra.
"""
