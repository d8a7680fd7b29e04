"""Start a run of a judgeflow deployment from Python, and by default wait for it to finish.

    export PREFECT_API_URL=http://127.0.0.1:4200/api
    .venv/bin/python deployments/trigger_examples/run_from_python.py   # evaluate, its defaults
    .venv/bin/python deployments/trigger_examples/run_from_python.py \
        --deployment regression/nightly-regression \
        --params '{"suite": "rag-nightly", "data": "s3://evals/rag.parquet",
                   "judge": {"model": "openai/gpt-4o-mini"}, "output": "s3://eval-results"}'

Without --params the run takes the deployment's own default parameters, whichever deployment
it is (the bundled ones judge the examples with the offline judge: no key, no network). A
process worker runs the flow in the checkout's root (the deployment's pull step), so relative
paths in the parameters resolve there, not where this script runs. Given `params` replace the
deployment's default `params` as a whole (Prefect merges one key deep): give every field the
flow needs. Exit code: 0 when the run completed (or, with --timeout 0, was created).
"""

from __future__ import annotations

import argparse
import json
import sys

from prefect.deployments import run_deployment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", default="evaluate/evaluate", help="FLOW/DEPLOYMENT")
    parser.add_argument("--params", type=json.loads, default=None,
                        help="the flow's `params` as a JSON object (default: the deployment's)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for the run (default: until it ends; 0: don't)")
    parser.add_argument("--idempotency-key", default=None,
                        help="a second call with the same key returns the first call's run")
    args = parser.parse_args(argv)

    flow_run = run_deployment(
        args.deployment,
        # None sends no parameters, so the server applies the deployment's defaults.
        parameters=None if args.params is None else {"params": args.params},
        timeout=args.timeout,
        idempotency_key=args.idempotency_key,
    )
    state = flow_run.state
    print(json.dumps({"flow_run_id": str(flow_run.id), "name": flow_run.name,
                      "state": state.type.value if state else None}))
    if args.timeout == 0:
        return 0
    return 0 if state is not None and state.is_completed() else 1


if __name__ == "__main__":
    sys.exit(main())
