"""The command line's options, each declared once; each command names the groups it takes.

`evaluate` and `regression` judge a set the same way, so they take the same judge, candidate,
evaluation and run options from here (a new evaluate option reaches regression by itself);
`compare` takes the judge and run options. A command is a function of `**options` given its
signature by `with_options`, which typer reads as if it had been written out by hand. Only
typer is imported here: `judgeflow --help` stays fast.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer

from flows.commands.common import fail, parse_storage_options
from tasks.mlflow.source import is_mlflow_source
from tasks.mlflow.stores import UnsupportedTrackingURI, store_of

REQUIRED = inspect.Parameter.empty


def _option(kind: Any, default: Any, help_text: str, *flags: str, **extra: Any) -> tuple:
    return Annotated[kind, typer.Option(*flags, help=help_text, **extra)], default


OPTIONS: dict[str, tuple] = {
    # the judge
    "judge_model": _option(str, REQUIRED, "litellm model string; 'judgeflow/offline' for the "
                           "offline heuristic judge"),
    "api_base": _option(str | None, None, "Endpoint override for the judge model"),
    "api_key_env": _option(str | None, None, "Env variable holding the judge's API key"),
    "temperature": _option(float, 0.0, "Judge sampling temperature"),
    "concurrency": _option(int | None, None, "Model calls in flight (default: adaptive, "
                           "opening at 16 and growing up to --max-concurrency while the provider "
                           "answers without a 429)"),
    "max_concurrency": _option(int, 128, "Ceiling of the adaptive concurrency"),
    "rpm": _option(int | None, None, "Requests per minute cap"),
    "tpm": _option(int | None, None, "Tokens per minute cap"),
    "max_attempts": _option(int, 5, "Attempts per judge call on 429/5xx/timeout/connection "
                            "errors"),
    "judge_max_tokens": _option(int | None, None, "Cap on each judge reply's tokens, reasoning "
                                "included (needed with --max-cost)", min=1),
    "price_per_mtok": _option(str | None, None, "The judge's price, INPUT,OUTPUT in USD per "
                              "million tokens, for a model litellm's price map does not know"),
    # the candidate model, when judgeflow generates the responses
    "candidate_model": _option(str | None, None, "Generate the responses with this litellm "
                               "model (the set then needs no response)"),
    "candidate_api_base": _option(str | None, None, "Endpoint of the candidate model"),
    "candidate_api_key_env": _option(str | None, None, "Env variable holding the candidate's "
                                     "API key"),
    "candidate_max_attempts": _option(int | None, None, "Attempts per generation call "
                                      "(default: --max-attempts)"),
    "candidate_max_tokens": _option(int | None, None, "Cap on each generated response's "
                                    "tokens, reasoning included (needed with --max-cost)",
                                    min=1),
    "candidate_price_per_mtok": _option(str | None, None, "The candidate's price, "
                                        "INPUT,OUTPUT in USD per million tokens"),
    # what is judged
    "judges": _option(str | None, None, "Comma-separated judges to run"),
    "custom_judges": _option(str | None, None, "YAML/JSON file of custom judges"),
    "aspect": _option(list[str] | None, None, "Aspect critic NAME=DEFINITION or a predefined "
                      "NAME (repeatable)"),
    "strictness": _option(int, 1, "Samples per aspect critic (odd; majority vote)"),
    "allow_extra_columns": _option(bool, False, "Keep unknown columns even when they look like "
                                   "a misspelt known one", "--allow-extra-columns"),
    "labels": _option(str | None, None, "People's labels to join on request_id: rows of "
                      "{request_id, human_labels}"),
    "calibration": _option(str | None, None, "Reuse the judge calibration of this earlier "
                           "labelled run of the suite"),
    "calibration_floor": _option(float | None, None, "Judges whose kappa 95% lower bound is "
                                 "below this are advisory: gates on them are undecidable"),
    "calibration_min_labels": _option(int, 50, "Fewest labelled units with which a "
                                      "calibration can vouch for a judge at the floor"),
    "calibration_seed": _option(int, 0, "Seed of the kappa interval"),
    # where and how the run goes
    "output": _option(str, "./results", "Output folder or s3:// URL"),
    "suite": _option(str, "default", "Suite name"),
    "run_id": _option(str | None, None, "Run id (default: a UTC timestamp)"),
    "chunk_size": _option(int | None, None, "Rows (or pairs) per task run"),
    "on_invalid": _option(str, "fail", "fail | skip"),
    "max_error_share": _option(float, 0.05, "Largest share of a judge's rows (or of the pairs) "
                               "that may fail; above it the run is incomplete (exit 3)"),
    "no_cache": _option(bool, False, "Ignore the judge reply cache", "--no-cache"),
    "storage_option": _option(list[str] | None, None, "fsspec option KEY=VALUE for s3://, e.g. "
                              "endpoint_url=http://minio:9000"),
    "shards": _option(int, 1, "Judge in N child flow runs of the shard deployment, run by the "
                      "workers of its work pool (needs a Prefect server: PREFECT_API_URL)"),
    "max_cost": _option(float | None, None, "Run budget in USD: refused (exit 2) if the "
                        "estimate is above it; no call starts once it would be passed (exit 3)"),
    "over_estimate": _option(bool, False, "Start even if the estimate is above --max-cost",
                             "--over-estimate"),
    "batch": _option(bool, False, "Send the model calls through the provider's batch API "
                     "(about half the price; rerun with the same --run-id to resume)",
                     "--batch"),
    "batch_retry": _option(str, "batch", "Where a request the batch failed or let expire is "
                           "asked again: batch (a follow-up batch) or online"),
    "batch_max_requests": _option(int, 50_000, "Most requests per batch file"),
    "batch_poll_max": _option(float, 60.0, "Longest wait in seconds between two polls of a "
                              "batch"),
    "mlflow_tracking_uri": _option(str | None, None, "Log the published run to this MLflow "
                                   "tracking URI: http(s)://HOST:PORT, sqlite:///PATH.db, "
                                   "file:///PATH, databricks[://PROFILE] (docs/mlflow.md); an "
                                   "mlflow: evaluation set is read from it too",
                                   envvar="MLFLOW_TRACKING_URI"),
    "no_mlflow": _option(bool, False, "Do not log to MLflow, even with MLFLOW_TRACKING_URI set "
                         "(an mlflow: set is still read from it)", "--no-mlflow"),
    "mlflow_experiment": _option(str | None, None, "MLflow experiment to log to (default: the "
                                 "suite)"),
    "no_progress": _option(bool, False, "No live progress display (shown only when stderr is "
                           "a terminal)", "--no-progress"),
}

JUDGE_OPTIONS = ("judge_model", "api_base", "api_key_env", "temperature", "concurrency",
                 "max_concurrency", "rpm", "tpm", "max_attempts", "judge_max_tokens",
                 "price_per_mtok")
CANDIDATE_OPTIONS = ("candidate_model", "candidate_api_base", "candidate_api_key_env",
                     "candidate_max_attempts", "candidate_max_tokens",
                     "candidate_price_per_mtok")
EVALUATION_OPTIONS = ("judges", "custom_judges", "aspect", "strictness", "allow_extra_columns",
                      "labels", "calibration", "calibration_floor", "calibration_min_labels",
                      "calibration_seed")
RUN_OPTIONS = ("output", "suite", "run_id", "chunk_size", "on_invalid", "max_error_share",
               "no_cache", "storage_option", "shards", "max_cost", "over_estimate", "batch",
               "batch_retry", "batch_max_requests", "batch_poll_max", "mlflow_tracking_uri",
               "no_mlflow", "mlflow_experiment", "no_progress")
# What each command takes besides its own: evaluate and regression judge rows, compare pairs.
ROW_RUN_OPTIONS = (JUDGE_OPTIONS, CANDIDATE_OPTIONS, EVALUATION_OPTIONS, RUN_OPTIONS)
PAIR_RUN_OPTIONS = (JUDGE_OPTIONS, RUN_OPTIONS)


def with_options(*groups: tuple[str, ...], own: Mapping[str, tuple] | None = None
                 ) -> Callable[[Callable], Callable]:
    """Give a `**options` command the signature of its own options, then of these groups.

    Args:
        groups: tuples of names from OPTIONS.
        own: the command's own options, `name: (Annotated type, default)`, listed first.
    """
    declared = {**(own or {}), **{name: OPTIONS[name] for group in groups for name in group}}

    def apply(command: Callable) -> Callable:
        command.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                              default=default)
            for name, (kind, default) in declared.items()
        ])
        return command

    return apply


def judge_model_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    """JudgeModel's fields from the judge options."""
    return {"model": options["judge_model"], "api_base": options["api_base"],
            "api_key_env": options["api_key_env"], "temperature": options["temperature"],
            "concurrency": options["concurrency"], "max_concurrency": options["max_concurrency"],
            "rpm": options["rpm"], "tpm": options["tpm"],
            "max_attempts": options["max_attempts"], "max_tokens": options["judge_max_tokens"],
            "price_per_mtok": parse_price(options["price_per_mtok"], "--price-per-mtok")}


def parse_price(text: str | None, option: str) -> tuple[float, float] | None:
    """"0.15,0.6" as (0.15, 0.6); a malformed price exits 2 naming the option."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        price_in, price_out = (float(p) for p in parts)
    except ValueError:
        fail(f"{option} takes INPUT,OUTPUT in USD per million tokens, e.g. 0.15,0.6; "
             f"got {text!r}")
    return price_in, price_out


def candidate_fields(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """CandidateModel's fields from the candidate options; None when no candidate is named.

    An endpoint or key variable without a candidate model exits 2.
    """
    if options["candidate_model"] is None:
        if (options["candidate_api_base"] or options["candidate_api_key_env"]
                or options["candidate_max_tokens"]):
            fail("--candidate-api-base, --candidate-api-key-env and --candidate-max-tokens "
                 "need --candidate-model MODEL")
        return None
    attempts = options["candidate_max_attempts"] or options["max_attempts"]
    return {"model": options["candidate_model"], "api_base": options["candidate_api_base"],
            "api_key_env": options["candidate_api_key_env"], "max_attempts": attempts,
            "max_tokens": options["candidate_max_tokens"],
            "concurrency": options["concurrency"], "max_concurrency": options["max_concurrency"],
            "price_per_mtok": parse_price(options["candidate_price_per_mtok"],
                                          "--candidate-price-per-mtok")}


def evaluation_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    """EvaluateParams' fields (RegressionParams' too) from the shared options."""
    return {**judging_fields(options), "candidate": candidate_fields(options)}


def judging_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    """The judge, the judges and the run's fields: all EvaluateParams takes but the candidate."""
    judges = options["judges"]
    return {
        "judge": judge_model_fields(options),
        "judges": [p.strip() for p in judges.split(",") if p.strip()] if judges else None,
        "custom_judges": options["custom_judges"], "aspects": options["aspect"] or [],
        "strictness": options["strictness"],
        "allow_extra_columns": options["allow_extra_columns"], "labels": options["labels"],
        "calibration": options["calibration"],
        "calibration_floor": options["calibration_floor"],
        "calibration_min_labels": options["calibration_min_labels"],
        "calibration_seed": options["calibration_seed"], **run_fields(options),
    }


def tracking_uri(options: Mapping[str, Any]) -> str | None:
    """--mlflow-tracking-uri (or $MLFLOW_TRACKING_URI); one of no kind MLflow takes exits 2.

    With --no-mlflow the run does not use it, unless its set is read from MLflow: the
    environment then cannot stop a run that asked for no MLflow.
    """
    uri = (options["mlflow_tracking_uri"] or "").strip()
    if options.get("no_mlflow") and not is_mlflow_source(options.get("data")):
        return None
    if uri:
        try:
            store_of(uri)
        except UnsupportedTrackingURI as error:
            fail(f"{error} (--mlflow-tracking-uri or MLFLOW_TRACKING_URI); or pass --no-mlflow")
    return uri or None


def run_fields(options: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every run's parameters share, from the run options."""
    return {"output": options["output"], "suite": options["suite"],
            "run_id": options["run_id"], "chunk_size": options["chunk_size"],
            "on_invalid": options["on_invalid"], "max_error_share": options["max_error_share"],
            "use_cache": not options["no_cache"],
            "storage_options": parse_storage_options(options["storage_option"]),
            "shards": options["shards"], "max_cost_usd": options["max_cost"],
            "over_estimate": options["over_estimate"], "batch": options["batch"],
            "batch_retry": options["batch_retry"],
            "batch_max_requests": options["batch_max_requests"],
            "batch_poll_max_seconds": options["batch_poll_max"],
            "mlflow_tracking_uri": tracking_uri(options),
            "mlflow_logging": not options.get("no_mlflow"),
            "mlflow_experiment": options["mlflow_experiment"]}
