"""Parameters of the flows, as pydantic models: the Prefect UI renders them as forms.

Each field also says how the command line gives it (flows/flags.py): the commands' options
are generated from these models (flows/commands/options.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from flows.flags import (
    FORM_ONLY,
    REQUIRED,
    Flag,
    Nested,
    comma_list,
    key_values,
    listed,
    price,
    turned_off_by,
)
from judges.model.settings import API_KEY_ENV_PATTERN, LLMSettings, ModelKnobs, Price
from judges.storage import check_storage_options, check_url
from tasks.mlflow.source import is_mlflow_source, pinned
from tasks.mlflow.stores import UnsupportedTrackingURI, store_of
from tasks.regression.canary import DEFAULT_CANARY_ROWS, DEFAULT_MIN_AGREEMENT

# Run ids and suite names become path segments: nothing that could climb out of the prefix.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# Flow parameters are stored by the Prefect API and shown in its UI, and whoever triggers a
# deployment run chooses them: storage options come from an allow-list (judges/storage.py),
# which holds no credential, no file location and no other filesystem.
StorageOptions = Annotated[
    dict[str, Any],
    AfterValidator(check_storage_options),
    Field(description="fsspec options for s3:// (endpoint_url, anon, profile, client_kwargs."
          "region_name, config_kwargs retries and timeouts); never credentials"),
]

# Every URL a run opens: a plain path or an s3:// URL (more only if the operator allows them).
StorageURL = Annotated[str, AfterValidator(check_url)]


def _data_source(value: str) -> str:
    """A set's URL as checked, or an `mlflow:` source as the run records it (times pinned)."""
    return pinned(value) if is_mlflow_source(value) else check_url(value)


# An evaluation set: a URL as above, or a set kept in MLflow (tasks/mlflow/source.py).
DataSource = Annotated[str, AfterValidator(_data_source)]


def _no_parent_reference(value: str) -> str:
    if ".." in value:
        raise ValueError(f"{value!r} must not contain '..'")
    return value


# A suite name, run id or baseline id: a single safe path segment. The pattern is also in the
# JSON schema, so the Prefect API itself refuses a bad name (HTTP 409) before any run starts.
SafeName = Annotated[str, Field(pattern=SAFE_NAME.pattern), AfterValidator(_no_parent_reference)]


def check_safe_name(value: str, what: str) -> str:
    """The value unchanged if it is a single safe path segment; raise ValueError naming `what`."""
    if not SAFE_NAME.match(value) or ".." in value:
        raise ValueError(
            f"{what} {value!r} must be 1-128 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'"
        )
    return value


def _tracking_uri(value: str | None) -> str | None:
    """A tracking URI of a kind MLflow's client takes (tasks/mlflow/stores.py), no credentials."""
    # Prefect stores and shows flow parameters, and the manifest records them.
    if value is not None and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
        raise ValueError("the MLflow tracking URI must not carry credentials: set "
                         "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or "
                         "MLFLOW_TRACKING_TOKEN (DATABRICKS_TOKEN for Databricks), in the "
                         "environment instead")
    if value is not None:
        store_of(value)  # UnsupportedTrackingURI is a ValueError: pydantic says which field
    return value


def tracking_uri(value: str | None, options: Mapping[str, Any]) -> str | None:
    """--mlflow-tracking-uri (or $MLFLOW_TRACKING_URI) as the field.

    One of no kind MLflow takes is refused. With --no-mlflow the run does not use it, unless
    its set is read from MLflow: the environment then cannot stop a run that asked for no
    MLflow.
    """
    uri = (value or "").strip()
    if options.get("no_mlflow") and not is_mlflow_source(options.get("data")):
        return None
    if uri:
        try:
            store_of(uri)
        except UnsupportedTrackingURI as error:
            raise ValueError(f"{error} (--mlflow-tracking-uri or MLFLOW_TRACKING_URI); or pass "
                             "--no-mlflow") from None
    return uri or None


class PanelMember(BaseModel):
    """What one member of a panel of judge models does not share with the judge's knobs."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="The member's model, one of the judge's comma list")
    api_base: str | None = Field(
        None, description="The member's endpoint (default: the judge's). A member with an "
        "endpoint of its own never gets the judge's key variable: name its own")
    api_key_env: str | None = Field(
        None, pattern=API_KEY_ENV_PATTERN,
        description="Environment variable (NAME_API_KEY) holding the member's key")
    price_per_mtok: Price | None = Field(
        None, description="The member's USD per million input and output tokens")


def panel_names(model: str) -> list[str]:
    """The judge's models: "a, b,c" as ["a", "b", "c"] (one model: a list of one)."""
    return [part.strip() for part in model.split(",")]


class JudgeModel(ModelKnobs):
    """The judge model and how to call it; a comma list of models is a panel (judges/panel/)."""

    model: str = Field(
        description="litellm model string, e.g. openai/gpt-4o-mini, anthropic/claude-3-5-sonnet-"
        "20241022, hosted_vllm/llama-3; 'judgeflow/offline' for the offline heuristic judge; "
        "several, comma-separated, for a panel whose majority decides each verdict",
    )
    members: list[PanelMember] = Field(
        default_factory=list, description="A panel's members that do not share the judge's "
        "endpoint, key variable or price: each names one of the models and its own")
    advisory: list[str] = Field(
        default_factory=list, description="A panel's advisory members (comma-separated "
        "models of the judge's list): each is asked, costed and published, but does not vote; "
        "at least one member must vote")

    @model_validator(mode="after")
    def _panel(self) -> JudgeModel:
        names = panel_names(self.model)
        if len(names) == 1:
            if self.members or self.advisory:
                raise ValueError(f"judge.{'members' if self.members else 'advisory'} is for a "
                                 "panel: name its models as a comma list in judge.model (now "
                                 f"{self.model!r})")
            return self
        if any(not name for name in names):
            raise ValueError(f"judge model {self.model!r} has an empty name in its comma list")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"judge model {repeated[0]!r} is named twice in {self.model!r}: "
                             "each member of a panel once")
        given = [member.model for member in self.members]
        for name in given:
            if name not in names or given.count(name) > 1:
                raise ValueError(f"judge.members names {name!r}, "
                                 + ("twice" if name in names else f"not one of {self.model!r}"))
        self._advisory(names)
        # The canonical spelling: recorded, fingerprinted and cached the same however typed.
        self.__dict__["model"] = ",".join(names)
        return self

    def _advisory(self, names: list[str]) -> None:
        """Advisory members: each one of the panel's models, once, and not all of them."""
        self.__dict__["advisory"] = [name.strip() for name in self.advisory]
        for name in self.advisory:
            if name not in names or self.advisory.count(name) > 1:
                raise ValueError(f"advisory judge model {name!r} is "
                                 + ("named twice" if name in names
                                    else f"not one of the panel {','.join(names)!r}")
                                 + " (--advisory-judge-model or judge.advisory)")
        if set(names) <= set(self.advisory):
            raise ValueError(f"every member of the panel {','.join(names)!r} is advisory: at "
                             "least one must vote (--advisory-judge-model or judge.advisory)")

    @model_serializer(mode="wrap")
    def _as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # One judge model is recorded (manifest's config, flow parameters) as it always was.
        dumped = handler(self)
        for key in ("members", "advisory"):  # a panel's only
            if isinstance(dumped, dict) and not dumped.get(key, True):
                del dumped[key]
        return dumped

    def panel_members(self) -> list[JudgeModel]:
        """Each member as a judge model of its own (one model: this one).

        A member shares the judge's knobs unless it names its own; one with its own endpoint
        has only its own key variable.
        """
        names = panel_names(self.model)
        if len(names) == 1:
            return [self]
        own = {member.model: member for member in self.members}
        knobs = self.model_dump(exclude={"members", "advisory"})
        out = []
        for name in names:
            update: dict[str, Any] = {"model": name}
            if name in own:
                member = own[name]
                if member.api_base is not None:
                    update |= {"api_base": member.api_base, "api_key_env": member.api_key_env}
                elif member.api_key_env is not None:
                    update["api_key_env"] = member.api_key_env
                if member.price_per_mtok is not None:
                    update["price_per_mtok"] = member.price_per_mtok
            out.append(JudgeModel(**{**knobs, **update}))
        return out

    def with_members(self, members: list[JudgeModel]) -> JudgeModel:
        """This panel with its members as given (e.g. paired by the operator's rules)."""
        if len(members) == 1:
            return members[0]
        return self.model_copy(update={"members": [
            PanelMember(model=m.model, api_base=m.api_base, api_key_env=m.api_key_env,
                        price_per_mtok=m.price_per_mtok) for m in members]})

    def settings(self) -> LLMSettings:
        """These parameters as the LLMSettings of the judge's calls."""
        knobs = self.model_dump(exclude={"members", "advisory"})
        if len(panel_names(self.model)) == 1:
            return LLMSettings(**knobs)
        return LLMSettings(**knobs, members=tuple(
            LLMSettings(**member.model_dump(exclude={"members", "advisory"}),
                        advisory=member.model in self.advisory)
            for member in self.panel_members()))


class CandidateModel(ModelKnobs):
    """The system under evaluation, when judgeflow generates its responses."""

    model: str = Field(description="litellm model string of the candidate, e.g. openai/my-ft")

    def settings(self) -> LLMSettings:
        """These parameters as the LLMSettings of the candidate's calls."""
        return LLMSettings(**self.model_dump())


def _listed_models(value: str | None, options: Mapping[str, Any]) -> list[str]:
    """--advisory-judge-model "b, c" as ["b", "c"]; not given, none."""
    return comma_list(value, options) or []


# How the command line gives each knob of the judge and of the candidate (flows/flags.py): a
# knob not named here is an option of its own name for the judge and form-only for the
# candidate.
JUDGE_FLAGS = Nested(
    "judge", {"model": Flag("judge_model", default=REQUIRED),
              "max_tokens": Flag("judge_max_tokens", min=1),
              "price_per_mtok": Flag(kind=str | None, to_field=price("--price-per-mtok")),
              "timeout_seconds": FORM_ONLY, "backoff_seconds": FORM_ONLY,
              "members": FORM_ONLY,
              "advisory": Flag("advisory_judge_model", kind=str | None, default=None,
                               to_field=_listed_models)},
)
CANDIDATE_FLAGS = Nested(
    "candidate", {"model": Flag("candidate_model", kind=str | None, default=None),
                  "api_base": Flag("candidate_api_base"),
                  "api_key_env": Flag("candidate_api_key_env"),
                  # None: the judge's --max-attempts
                  "max_attempts": Flag("candidate_max_attempts", kind=int | None, default=None,
                                       fallback="max_attempts"),
                  "max_tokens": Flag("candidate_max_tokens", min=1),
                  "price_per_mtok": Flag("candidate_price_per_mtok", kind=str | None,
                                         to_field=price("--candidate-price-per-mtok")),
                  # generation shares the judge's window options
                  "concurrency": Flag("concurrency"), "max_concurrency": Flag("max_concurrency")},
    optional_unless="candidate_model", default_flags=FORM_ONLY,
)


Location = tuple[str, str, str]  # (parameter, URL, "read" or "write")


def locations_of(params: BaseModel, reads: tuple[str, ...], writes: tuple[str, ...]
                 ) -> list[Location]:
    """The URLs that these fields of `params` hold, with the access a run makes to each."""
    found = [(name, getattr(params, name), "read") for name in reads]
    found += [(name, getattr(params, name), "write") for name in writes]
    return [(name, url, access) for name, url, access in found if url is not None]


def _source_fields_first(schema: dict[str, Any], model: type[Any]) -> None:
    """The Prefect UI shows a form's fields in schema order: what the run reads comes first."""
    properties = schema.get("properties", {})
    first = {name: properties[name] for name in model.SOURCE_FIELDS if name in properties}
    schema["properties"] = {**first, **properties}


class RunOptions(BaseModel):
    """What every run shares: the judge, where results go, chunks, shards, cache, strictness.

    Subclasses add where their items come from (`SOURCE_FIELDS`, shown first in the Prefect
    UI) and which of their fields name locations (`READ_FIELDS`).
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_source_fields_first)

    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ()
    READ_FIELDS: ClassVar[tuple[str, ...]] = ()
    WRITE_FIELDS: ClassVar[tuple[str, ...]] = ("output", "cache")
    # The operator's alone when a run's parameters are untrusted (flows/preflight/suite_lock.py).
    OPERATOR_FIELDS: ClassVar[tuple[str, ...]] = ("suite", "output")

    judge: Annotated[JudgeModel, JUDGE_FLAGS] = Field(description="The judge model")
    output: Annotated[StorageURL, Flag()] = Field(
        "./results", description="Where runs are published (path or s3://...)")
    suite: Annotated[SafeName, Flag()] = Field(
        "default", description="Suite name: results go to {output}/{suite}/{run}"
    )
    run_id: Annotated[SafeName | None, Flag()] = Field(
        None, description="Run id (default: UTC timestamp)")
    chunk_size: Annotated[int | None, Flag()] = Field(
        None, ge=1, le=10_000,
        description="Rows (or pairs) per task run (default: sized to ~200 tasks)",
    )
    on_invalid: Annotated[Literal["fail", "skip"], Flag()] = Field(
        "fail", description="fail: reject the whole set on any invalid row; skip: set them aside"
    )
    max_error_share: Annotated[float, Flag()] = Field(
        0.05, ge=0, le=1, description="Largest share of a judge's rows (or of the pairs) that may "
        "fail (errors / (rated + errors)); above it the run is published as incomplete",
    )
    cache: Annotated[StorageURL | None, FORM_ONLY] = Field(
        None, description="Judge reply cache URL (default: {output}/.judgeflow-cache)"
    )
    use_cache: Annotated[bool, turned_off_by("no_cache")] = Field(
        True, description="Reuse cached judge replies for unchanged calls (--no-cache: ignore "
        "the cache)")
    shards: Annotated[int, Flag()] = Field(
        1, ge=1, le=256, description="Judge the rows (or pairs) in this many child flow runs of "
        "the shard deployment, on the workers of its work pool; each gets its share of "
        "concurrency, rpm and tpm (1: judge in this flow run). Needs a Prefect server and running "
        "workers",
    )
    shard_deployment: Annotated[str, FORM_ONLY] = Field(
        "judge-shard/judge-shard", pattern=r"^[^/]+/[^/]+$",
        description="The shard deployment (flow name/deployment name) that runs the shards",
    )
    storage_options: Annotated[StorageOptions, Flag(
        "storage_option", kind=list[str] | None, default=None, to_field=key_values,
    )] = Field(default_factory=dict)
    max_cost_usd: Annotated[float | None, Flag("max_cost")] = Field(
        None, gt=0, description="Run budget in USD: refused before any call if the estimate "
        "is above it, and no call is started once spent + reserved would pass it (the run is "
        "then published incomplete). Needs a known price for every model",
    )
    over_estimate: Annotated[bool, Flag()] = Field(
        False, description="Start even if the estimate is above max_cost_usd (the run still "
        "stops at the budget)",
    )

    batch: Annotated[bool, Flag()] = Field(
        False, description="Send the model calls through the provider's batch API (about half "
        "the price, answers within hours; OpenAI-compatible endpoints). The batches are kept in "
        "the run's folder: rerun with the same run_id to pick them up without paying twice",
    )
    batch_retry: Annotated[Literal["batch", "online"], Flag()] = Field(
        "batch", description="Where a request the batch failed or let expire is asked again: "
        "in a follow-up batch, or online at once (within the same attempts)",
    )
    batch_max_requests: Annotated[int, Flag()] = Field(
        50_000, ge=1, le=50_000, description="Most requests per batch file (the provider's "
        "limit; a larger run is split into several batches)",
    )
    batch_poll_max_seconds: Annotated[float, Flag("batch_poll_max")] = Field(
        60.0, gt=0, le=3600, description="Longest wait between two polls of a batch (polls "
        "start at 0.5 s and back off to this)",
    )

    mlflow_tracking_uri: Annotated[
        str | None, AfterValidator(_tracking_uri),
        Flag(envvar="MLFLOW_TRACKING_URI", to_field=tracking_uri),
    ] = Field(
        None, min_length=1, max_length=2000,
        description="Log the published run to this MLflow tracking URI: a server (http(s)://"
        "host:port), a local store (sqlite:///path.db, file:///path) or Databricks (databricks, "
        "databricks://PROFILE): one MLflow run with its params, metrics, tags, per-row table "
        "and report; an mlflow: evaluation set is read from it",
    )
    mlflow_logging: Annotated[bool, turned_off_by("no_mlflow")] = Field(
        True, description="Log the run to mlflow_tracking_uri (false: only read an mlflow: "
        "set from it; the command line's --no-mlflow)",
    )
    mlflow_experiment: Annotated[str | None, Flag()] = Field(
        None, min_length=1, max_length=500,
        description="MLflow experiment the run is logged to (default: the suite)",
    )

    def locations(self) -> list[Location]:
        """Every location a parameter names, with the access the run makes to it."""
        return locations_of(self, self.READ_FIELDS, self.WRITE_FIELDS)

    @model_validator(mode="after")
    def _budget_in_one_process(self) -> RunOptions:
        if self.max_cost_usd is not None and self.shards > 1:
            raise ValueError("max_cost_usd is kept by one process: it cannot be shared by "
                             "shards yet; run with shards 1 or without a budget")
        if self.batch and self.shards > 1:
            raise ValueError("batch mode keeps its batches in one process: run with shards 1 "
                             "(a batch needs no shards: the provider does the work)")
        return self


class EvaluateParams(RunOptions):
    """One evaluation run: where the set is, which judge, where results go."""

    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("data", "rows")
    READ_FIELDS: ClassVar[tuple[str, ...]] = ("data", "labels", "custom_judges")

    data: Annotated[DataSource | None,
                    Flag(argument=True, kind=str, default=REQUIRED)] = Field(
        None, description="Evaluation set URL: local path, file://, s3://... (.jsonl .json .csv "
        ".parquet); or a set in MLflow, read from mlflow_tracking_uri: mlflow:experiments/"
        "<name>/traces?filter=<MLflow trace filter>&since=<time>&until=<time> (ISO 8601 or "
        "-24h; the window ends when the run starts unless until is given) or mlflow:datasets/"
        "<name or id>",
    )
    rows: Annotated[list[dict[str, Any]] | None, FORM_ONLY] = Field(
        None, description="Rows given inline instead of a data URL (Databricks schema)"
    )
    candidate: Annotated[CandidateModel | None, CANDIDATE_FLAGS] = Field(
        None, description="Generate responses with this model for rows that have none"
    )
    judges: Annotated[list[str] | None, Flag(kind=str | None, to_field=comma_list)] = Field(
        None, description="Judges to run (default: every judge whose inputs the set has)"
    )
    custom_judges: Annotated[StorageURL | None, Flag()] = Field(
        None, description="YAML/JSON file of custom judges (name, assessment_type, instructions)"
    )
    aspects: Annotated[list[str], Flag("aspect", kind=list[str] | None, default=None,
                                       to_field=listed)] = Field(
        default_factory=list,
        description="Aspect critics: NAME=DEFINITION, or a predefined name (harmfulness, "
        "maliciousness, coherence, correctness, conciseness)",
    )
    strictness: Annotated[int, Flag()] = Field(
        1, ge=1, le=15, description="Samples per aspect; a verdict needs a strict majority (an "
        "even number is rounded up to the next odd one, with a warning)",
    )
    allow_extra_columns: Annotated[bool, Flag()] = Field(
        False, description="Keep unknown columns even when their name is a near miss of a known "
        "one (e.g. 'reponse'); by default such a column is refused as a likely typo",
    )
    labels: Annotated[StorageURL | None, Flag()] = Field(
        None, description="People's labels joined onto the set on request_id: a file of rows "
        "{request_id, human_labels} (JSONL, JSON, CSV or Parquet)",
    )
    calibration: Annotated[SafeName | None, Flag()] = Field(
        None, description="Reuse the judge calibration of this earlier labelled run of the "
        "suite (marked stale if the judge model, version or prompt differs)",
    )
    calibration_floor: Annotated[float | None, Flag()] = Field(
        None, ge=-1, le=1, description="A judge whose kappa 95% lower bound is below this is "
        "advisory: a regression gate on its metrics is undecidable",
    )
    calibration_seed: Annotated[int, Flag()] = Field(
        0, description="Seed of the kappa interval (posterior draws and 1000 row resamples)")
    calibration_min_labels: Annotated[int, Flag()] = Field(
        50, ge=1, description="Fewest labelled units with which a calibration can vouch for a "
        "judge at the floor; below it the judge is advisory",
    )

    def locations(self) -> list[Location]:
        """Every location a parameter names; a set in MLflow is none (its server is checked)."""
        return [(name, url, access) for name, url, access in super().locations()
                if not (name == "data" and is_mlflow_source(url))]

    @model_validator(mode="after")
    def _one_source(self) -> EvaluateParams:
        if (self.data is None) == (self.rows is None):
            raise ValueError("give exactly one of data (a URL) or rows (inline)")
        return self


NO_CANDIDATE_MODEL = (
    "candidate.model is empty: the run was started without a candidate model (a model.deployed "
    "event must carry payload.model, e.g. emit_model_deployed.py --model NAME)"
)


class RegressionParams(EvaluateParams):
    """A nightly (or post-deploy) regression run of one suite.

    Every evaluate parameter, plus the baseline, the gates and how undecidable runs are told
    apart.
    """

    READ_FIELDS: ClassVar[tuple[str, ...]] = (*EvaluateParams.READ_FIELDS, "gates", "rubric")
    OPERATOR_FIELDS: ClassVar[tuple[str, ...]] = (*EvaluateParams.OPERATOR_FIELDS, "baseline")

    # The command line's --suite has always defaulted to "default" (RunOptions'), not "nightly".
    suite: Annotated[SafeName, Flag(default="default")] = Field(
        "nightly", description="Suite: the baseline is this suite's newest run that passed"
    )
    baseline: Annotated[SafeName | None, Flag()] = Field(
        None, description="Run id to compare with (default: the suite's newest run that passed, "
        "{output}/{suite}/baseline.json)",
    )
    gates: Annotated[StorageURL | None, Flag(kind=str, default=REQUIRED)] = Field(
        "deployments/gates.yaml", description="YAML file of gates (thresholds per metric)"
    )
    pairwise: Annotated[bool, turned_off_by("no_pairwise")] = Field(
        True, description="Also judge baseline vs candidate responses head to head (both orders)"
    )
    rubric: Annotated[StorageURL | None, Flag()] = Field(
        None, description="Fixed rubric file for the head-to-head")
    strict_ties: Annotated[bool, Flag()] = Field(
        False, description="Head-to-head: one tie + one preference = tie")
    min_paired: Annotated[int, Flag()] = Field(
        10, ge=2, description="Fewest rows paired with the baseline for a gate to be decided"
    )
    min_coverage: Annotated[float, Flag()] = Field(
        0.9, ge=0, le=1, description="Smallest share of the baseline's rated rows that must "
        "pair (same request_id, request and expected answer) for a relative gate to decide",
    )
    canary_rows: Annotated[int, Flag()] = Field(
        DEFAULT_CANARY_ROWS, ge=0, le=10_000, description="Judge drift canary: how many of the "
        "baseline's rows tonight's judge judges again (never from the cache) to compare with "
        "the baseline's verdicts; 0 turns it off unless the judge fingerprint changed",
    )
    canary_min_agreement: Annotated[float, Flag()] = Field(
        DEFAULT_MIN_AGREEMENT, ge=0, le=1, description="A judge agreeing with its own baseline "
        "verdicts on fewer of the canary's rows than this has drifted: the night is incomplete",
    )
    canary_seed: Annotated[int, Flag()] = Field(
        0, description="Seed of the canary's sample of baseline rows")
    rejudge_baseline: Annotated[bool, Flag()] = Field(
        False, description="When another judge (model, prompt, endpoint, sampling) judged the "
        "baseline, judge its responses again with tonight's judge first and compare with that "
        "(a rejudge run of the suite, reused on later nights); off: such gates are undecidable",
    )

    @model_validator(mode="after")
    def _candidate_is_named(self) -> RegressionParams:
        if self.candidate is not None and not self.candidate.model.strip():
            raise ValueError(NO_CANDIDATE_MODEL)
        return self


class RejudgeParams(EvaluateParams):
    """A published run of the suite judged again, by this judge.

    Judges, aspects, custom judges and strictness default to the source run's.
    """

    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("source_run",)
    # Its rows are a published run's, under `output` (a write root, read back as a baseline
    # is); the files the source's manifest names are checked like parameters.
    READ_FIELDS: ClassVar[tuple[str, ...]] = ("labels", "custom_judges")
    OPERATOR_FIELDS: ClassVar[tuple[str, ...]] = (*EvaluateParams.OPERATOR_FIELDS, "as_baseline")

    source_run: Annotated[SafeName, Flag(argument=True)] = Field(
        description="Run id of the suite's published run to judge again")
    as_baseline: Annotated[bool, Flag()] = Field(
        False, description="Make the new run the suite's baseline if it is complete: adopt "
        "this judge on purpose (its lineage is in the manifest)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RejudgeParams:
        if self.data is not None or self.rows is not None:
            raise ValueError("a rejudge reads the source run's stored responses: give "
                             "source_run, not data or rows")
        if self.candidate is not None:
            raise ValueError("a rejudge judges the source run's stored responses: no candidate")
        return self
