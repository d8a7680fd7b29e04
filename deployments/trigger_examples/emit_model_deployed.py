"""Announce a model deploy to Prefect; post-deploy-eval's trigger turns it into a flow run.

    export PREFECT_API_URL=http://127.0.0.1:4200/api
    .venv/bin/python deployments/trigger_examples/emit_model_deployed.py \
        --model hosted_vllm/support-bot-v7 --endpoint http://10.0.0.5:8000/v1

Call it from the deploy pipeline once the new model answers. The trigger in
deployments/prefect.yaml matches resources named `model.*` and copies `payload.model` and
`payload.endpoint` into the run's `params.candidate`; the endpoint is reached from the worker,
so give an address the worker can resolve. The API key stays on the worker (candidate
api_key_env), never in the event.
"""

from __future__ import annotations

import argparse
import json
import sys

from prefect.events import emit_event


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="litellm model string of the new model")
    parser.add_argument("--endpoint", default=None, help="its api_base, if not the provider's")
    parser.add_argument("--name", default=None,
                        help="the deployed service's name (resource model.<name>; default: model)")
    args = parser.parse_args(argv)

    name = args.name or args.model
    payload = {"model": args.model}
    if args.endpoint:
        payload["endpoint"] = args.endpoint
    event = emit_event(
        "model.deployed",
        resource={"prefect.resource.id": f"model.{name}", "prefect.resource.name": name},
        payload=payload,
    )
    if event is None:
        # emit_event is silent when no events client is configured: say so instead.
        print("no event sent: is PREFECT_API_URL set to a Prefect server?", file=sys.stderr)
        return 1
    print(json.dumps({"event_id": str(event.id), "resource": event.resource.id,
                      "payload": payload}))
    # The event leaves from a background thread, flushed when the interpreter exits.
    return 0


if __name__ == "__main__":
    sys.exit(main())
