"""Point an MLflow model-registry webhook at `judgeflow mlflow-relay` (post-deploy-eval).

A deploy in the registry (an alias set, or a new version) then starts post-deploy-eval.

    # 1. the relay, next to the Prefect server (same secret on both sides)
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    export JUDGEFLOW_MLFLOW_WEBHOOK_SECRET=$(openssl rand -hex 32)
    .venv/bin/judgeflow mlflow-relay --host 0.0.0.0 --port 8765 \
        --model 'hosted_vllm/{name}' --endpoint http://10.0.0.5:8000/v1 \
        --on model_version_alias.created --alias champion

    # 2. the webhook, once (MLflow 3.3 or later, SQL backend store)
    export MLFLOW_TRACKING_URI=http://mlflow.internal:5000
    .venv/bin/python deployments/trigger_examples/mlflow_webhook.py \
        --url http://relay.internal:8765/ --event model_version_alias.created

    # 3. a deploy: set the alias; post-deploy-eval starts with hosted_vllm/support-bot
    mlflow.MlflowClient().set_registered_model_alias("support-bot", "champion", 7)

The secret is read from the same variable the relay reads and never printed. MLflow delivers
only to https URLs on public addresses unless its server runs with
MLFLOW_WEBHOOK_ALLOWED_SCHEMES=http,https and MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true
(docs/mlflow.md). An existing webhook of the same name is updated, not duplicated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

EVENTS = ("model_version.created", "model_version_alias.created")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the relay's URL, as MLflow reaches it")
    parser.add_argument("--event", action="append", choices=EVENTS,
                        help="registry event to deliver (repeatable; default: both)")
    parser.add_argument("--name", default="judgeflow-post-deploy", help="the webhook's name")
    parser.add_argument("--secret-env", default="JUDGEFLOW_MLFLOW_WEBHOOK_SECRET",
                        help="variable holding the shared secret")
    args = parser.parse_args(argv)
    secret = os.environ.get(args.secret_env)
    if not secret:
        print(f"${args.secret_env} is not set: the relay refuses unsigned deliveries",
              file=sys.stderr)
        return 2

    from mlflow import MlflowClient

    client = MlflowClient()  # MLFLOW_TRACKING_URI
    events = args.event or list(EVENTS)
    existing, page = [], None
    while True:
        found = client.list_webhooks(page_token=page)
        existing += [w for w in found if w.name == args.name]
        if not (page := found.token):
            break
    if existing:
        webhook = client.update_webhook(existing[0].webhook_id, url=args.url, events=events,
                                        secret=secret, status="ACTIVE")
    else:
        webhook = client.create_webhook(name=args.name, url=args.url, events=events,
                                        secret=secret, description="judgeflow post-deploy-eval")
    print(json.dumps({"webhook_id": webhook.webhook_id, "name": webhook.name,
                      "url": webhook.url, "events": [str(e) for e in webhook.events]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
