"""The MLflow model-registry webhook relay: MLflow's signed deliveries become `model.deployed`.

Prefect's self-hosted server takes no inbound webhooks (those are Prefect Cloud's), so
`judgeflow mlflow-relay` serves the URL an MLflow webhook posts to, checks MLflow's signature,
maps the registry event to a candidate model and emits the Prefect event that
deployments/prefect.yaml's post-deploy-eval trigger already starts a regression on.
"""
