"""The names of the flows the command line runs, importable without importing Prefect.

The command line names its flow to the temporary Prefect API before Prefect is imported (see
flows/commands/prefect_api.py), so the names live here rather than only in the flow decorators.
"""

EVALUATE = "evaluate"
COMPARE = "compare"
REGRESSION = "regression"
REJUDGE = "rejudge"
