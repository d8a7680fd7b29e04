"""The `judgeflow` command line: runs the flows (ephemeral Prefect API unless one is configured)."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The ephemeral API's telemetry write races its own start-up on SQLite ("database is locked").
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The temporary API starts in ~10 s on 2 busy cores; Prefect's default 20 s wait is too tight.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

import typer  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from flows.compare_cli import compare_command  # noqa: E402
from flows.evaluate import evaluate  # noqa: E402
from flows.manifest import OFFLINE_NOTICE  # noqa: E402
from flows.params import EvaluateParams, JudgeModel  # noqa: E402
from flows.regression_cli import regression_command  # noqa: E402
from judges.aspect_critic import AspectError  # noqa: E402
from judges.custom import CustomJudgeError  # noqa: E402
from judges.plan import JudgeSelectionError  # noqa: E402
from tasks.sources import DatasetReadError  # noqa: E402
from tasks.validation import InvalidDatasetError  # noqa: E402

EXIT_INVALID = 2  # invalid input or configuration: nothing was judged or published
EXIT_FAILED = 1  # the run itself failed (e.g. publishing)
CONFIG_ERRORS = (
    InvalidDatasetError,
    DatasetReadError,
    JudgeSelectionError,
    ValidationError,
    CustomJudgeError,
    AspectError,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """judgeflow: LLM-as-a-judge evaluations as Prefect flows."""


def parse_storage_options(items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` pairs from the command line as fsspec storage options."""
    options = {}
    for item in items or []:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            console.print(f"[bold red]invalid --storage-option {item!r}:[/] expected KEY=VALUE")
            raise typer.Exit(EXIT_INVALID)
        options[key.strip()] = value
    return options


def _split(value: str | None) -> list[str] | None:
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


def run_flow(flow_fn, params) -> dict:
    """Run a flow to its end; config errors exit 2, other failures 1."""
    state = asyncio.run(flow_fn(params, return_state=True))
    if state.is_completed():
        return state.result()
    error = state.result(raise_on_failure=False)
    console.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
    raise typer.Exit(EXIT_INVALID if isinstance(error, CONFIG_ERRORS) else EXIT_FAILED)


def print_summary(summary: dict) -> None:
    table = Table(title=f"run {summary['run_id']}", show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in summary["metrics"].items():
        if name.endswith(("/percentage", "/average")) or name.startswith("rows/"):
            shown = "n/a" if value is None else f"{value:.4g}"
            table.add_row(name, shown)
    Console().print(table)
    if summary["offline"]:
        console.print(f"[yellow]{OFFLINE_NOTICE}[/]")
    print(f"report:  {summary['files']['report.html']}")
    print(f"metrics: {summary['files']['metrics.json']}")


def build_params(factory, **fields):
    try:
        return factory(**fields)
    except ValidationError as error:
        messages = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        console.print(f"[bold red]invalid options:[/] {messages}")
        raise typer.Exit(EXIT_INVALID) from None


@app.command(name="evaluate")
def evaluate_command(
    data: Annotated[
        str, typer.Argument(help="Evaluation set: path or URL (.jsonl .json .csv .parquet)")
    ],
    judge_model: Annotated[
        str,
        typer.Option(
            help="litellm model string; 'judgeflow/offline' for the offline heuristic judge"
        ),
    ],
    api_base: Annotated[
        str | None, typer.Option(help="Endpoint override for the judge model")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env variable holding the judge's API key")
    ] = None,
    output: Annotated[str, typer.Option(help="Output folder or s3:// URL")] = "./results",
    suite: Annotated[str, typer.Option(help="Suite name")] = "default",
    run_id: Annotated[str | None, typer.Option(help="Run id (default: a UTC timestamp)")] = None,
    judges: Annotated[str | None, typer.Option(help="Comma-separated judges to run")] = None,
    concurrency: Annotated[int, typer.Option(help="Judge calls in flight")] = 8,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute cap")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute cap")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Rows per task run")] = None,
    on_invalid: Annotated[str, typer.Option(help="fail | skip")] = "fail",
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Ignore the judge reply cache")
    ] = False,
    custom_judges: Annotated[
        str | None, typer.Option(help="YAML/JSON file of custom judges")
    ] = None,
    aspect: Annotated[
        list[str] | None,
        typer.Option(help="Aspect critic NAME=DEFINITION or a predefined NAME (repeatable)"),
    ] = None,
    strictness: Annotated[
        int, typer.Option(help="Samples per aspect critic (odd; majority vote)")
    ] = 1,
    temperature: Annotated[float, typer.Option(help="Judge sampling temperature")] = 0.0,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(help="fsspec option KEY=VALUE for s3://, e.g. endpoint_url=http://minio:9000"),
    ] = None,
) -> None:
    """Judge an evaluation set and publish results, metrics and a report."""
    judge = build_params(
        JudgeModel,
        model=judge_model,
        api_base=api_base,
        api_key_env=api_key_env,
        concurrency=concurrency,
        rpm=rpm,
        tpm=tpm,
        temperature=temperature,
    )
    params = build_params(
        EvaluateParams,
        data=data,
        judge=judge,
        output=output,
        suite=suite,
        run_id=run_id,
        judges=_split(judges),
        chunk_size=chunk_size,
        on_invalid=on_invalid,
        use_cache=not no_cache,
        custom_judges=custom_judges,
        aspects=aspect or [],
        strictness=strictness,
        storage_options=parse_storage_options(storage_option),
    )
    print_summary(run_flow(evaluate, params))


app.command(name="compare")(compare_command)
app.command(name="regression")(regression_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
