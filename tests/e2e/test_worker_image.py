"""The worker image (Dockerfile) and the shard deployment on a Docker pool (docker.yaml).

Building the image needs a Docker daemon, which the development machines lack; the last test
builds and runs it where one answers, and says why it cannot otherwise. Everything short of it
runs here: the builder stage's install commands, run for real into a fresh virtualenv that then
judges the bundled example offline (marked `image`: it needs uv and a package registry or a
warm uv cache), the final stage read instruction by instruction, and the deployment file
deployed to a real Prefect server on a pool of type docker, then resolved as a Docker worker
would resolve it before starting a container. Where a daemon answers, the image is built and
run, and (given a prefect with prefect-docker) two Docker workers run a sharded run's shards
in it; docs/deployments.md ("Workers on other machines") says how they were run without a registry.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from flows.commands.pools import locked_template
from flows.preflight.trust import WRITE_ROOTS_ENV
from judges.integrity import SIGNING_KEY_ENV
from tests.docker_pool import DockerJobConfiguration, DockerShapedWorker
from tests.e2e import test_deployments
from tests.e2e.test_deployments import BIN, REPO, Server

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
DOCKER_YAML = REPO / "deployments" / "docker.yaml"
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
SHARD = "judge-shard"
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|gcc|cc|g\+\+|make|build-essential|pip|uv)\b")
ENTRYPOINT_SCRIPT = REPO / "deployments" / "pools" / "docker-entrypoint.sh"
SECRETS = "/run/secrets/judgeflow.env"

server = test_deployments.server


# ---------------------------------------------------------------------------- the Dockerfile


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for key, rest in self.instructions if key == keyword]

    def env(self) -> dict[str, str]:
        return {k: v for rest in self.args("ENV")
                for k, _, v in (word.partition("=") for word in shlex.split(rest))}

    def arg_defaults(self) -> dict[str, str]:
        return {k: v for rest in self.args("ARG")
                for k, _, v in (word.partition("=") for word in shlex.split(rest))}


def _dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, continuation lines joined, comments left out."""
    lines = [line for line in DOCKERFILE.read_text().splitlines()
             if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    global_args, stages = {}, []
    for line in filter(None, map(str.strip, text.splitlines())):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip() or None))
        elif stages:
            stages[-1].instructions.append((keyword, rest.strip()))
        elif keyword == "ARG":
            name, _, default = rest.partition("=")
            global_args[name] = default
    return global_args, stages


def _builder_and_final() -> tuple[Stage, Stage]:
    _, stages = _dockerfile()
    assert len(stages) == 2 and stages[0].name == "builder", [s.name for s in stages]
    return stages[0], stages[1]


def _makefile_uv_version() -> str:
    return re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)


def _uv_syncs(builder: Stage) -> list[list[str]]:
    """The builder's `uv sync` commands as words, without RUN's --mount options."""
    return [[w for w in shlex.split(run) if not w.startswith("--mount=")]
            for run in builder.args("RUN") if "uv sync" in run]


def test_the_image_installs_exactly_the_lock_from_wheels_with_the_makefile_s_uv():
    global_args, _ = _dockerfile()
    builder, final = _builder_and_final()
    # One base for both stages (the virtualenv points at its interpreter): Python 3.11, slim.
    assert builder.base == final.base == "${PYTHON_IMAGE}"
    assert global_args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert builder.arg_defaults()["UV_VERSION"] == _makefile_uv_version()
    assert any('"uv==${UV_VERSION}"' in run for run in builder.args("RUN"))
    syncs = _uv_syncs(builder)
    assert len(syncs) == 2 and "--no-install-project" in syncs[0]
    for words in syncs:
        # --frozen: the lock's versions or nothing; --no-build: wheels only, no compiler.
        assert {"--frozen", "--no-dev", "--no-build"} <= set(words), words
        assert "--upgrade" not in words and "--extra" not in words  # extras only via EXTRAS
    assert builder.arg_defaults()["EXTRAS"] == ""
    assert builder.env()["UV_PROJECT_ENVIRONMENT"] == "/opt/venv"


def test_the_final_stage_is_non_root_without_build_tools_and_copies_only_venv_and_code():
    builder, final = _builder_and_final()
    for run in final.args("RUN"):
        assert not BUILD_TOOLS.search(run), run
    copies = [shlex.split(rest) for rest in final.args("COPY")]
    assert copies == [["--from=builder", "/opt/venv", "/opt/venv"],
                      ["--from=builder", "/opt/judgeflow", "/opt/judgeflow"]]
    assert builder.args("WORKDIR") == final.args("WORKDIR") == ["/opt/judgeflow"]
    user = final.args("USER")
    assert user and user[-1] not in ("root", "0") and final.instructions[-2][0] == "USER"
    env = final.env()
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["PATH"].startswith(builder.env()["UV_PROJECT_ENVIRONMENT"] + "/bin:")
    assert final.instructions[-1] == ("CMD", '["judgeflow", "--help"]')


def test_the_build_context_holds_what_the_builder_copies_and_nothing_else():
    builder, _ = _builder_and_final()
    sources = {source for words in map(shlex.split, builder.args("COPY"))
               for source in words[:-1] if not source.startswith("--")}
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"  # everything out, then the allowed names back in
    allowed = {line[1:] for line in lines if line.startswith("!")}
    assert allowed == sources
    assert not allowed & {".venv", ".tools", ".git", "results", "tests", ".demo-prefect"}
    assert all((REPO / source).exists() for source in sources)


def _uv() -> Path | None:
    """The project's uv (`make` installs it in .tools), else one on PATH."""
    local = REPO / ".tools" / "bin" / "uv"
    found = local if local.exists() else shutil.which("uv")
    return Path(found) if found else None


def _uv_cache_dir() -> str:
    # conftest.py points XDG_CACHE_HOME at a fresh folder; uv's own cache stays warm.
    return os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")


def _base_python() -> str:
    """This interpreter's base python (the image's is /usr/local/bin/python3)."""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(Path(sys.base_prefix) / "bin" / name)


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh shell: none of the tests' Prefect, virtualenv or uv state."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "UV_", "VIRTUAL_ENV", "JUDGEFLOW_"))
           and k not in ("PYTHONPATH", "OPENAI_API_KEY")}
    return {**env, **extra}


@pytest.mark.image
def test_the_builder_s_install_runs_in_a_fresh_venv_which_then_judges_offline(tmp_path):
    builder, final = _builder_and_final()
    uv = _uv()
    if uv is None:
        pytest.skip("no uv: `make dev` installs the Makefile's uv in .tools/bin")
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[1] == builder.arg_defaults()["UV_VERSION"], version.stdout

    # The build context, laid out as the builder's COPY instructions lay it out.
    workdir = tmp_path / "opt-judgeflow"
    workdir.mkdir()
    for words in map(shlex.split, builder.args("COPY")):
        for source in words[:-1]:
            target = workdir / source if words[-1] in ("./", ".") else workdir / words[-1]
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(REPO / source, target)
    venv = tmp_path / "opt-venv"
    image_paths = {"/opt/venv": str(venv), "/opt/judgeflow": str(workdir),
                   "/usr/local/bin/python3": _base_python()}

    def local(text: str) -> str:
        for image_path, here in image_paths.items():
            text = text.replace(image_path, here)
        return text

    env = _clean_env(PATH=f"{uv.parent}{os.pathsep}{os.environ['PATH']}",
                     UV_CACHE_DIR=_uv_cache_dir(),
                     **{k: local(v) for k, v in builder.env().items()})
    # Compiling the bytecode (start-up speed, not what is installed) costs 35 s of CPU on the
    # 2-core machines: left to the image build.
    assert env.pop("UV_COMPILE_BYTECODE") == "1"
    extras = builder.arg_defaults()["EXTRAS"]
    for words in _uv_syncs(builder):
        command = [local(w) for w in words if w != "$EXTRAS"] + shlex.split(extras)
        done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stderr[-4000:]}"
    assert not (venv / "bin" / "pytest").exists()  # no development extras
    compiles = [run for run in builder.args("RUN") if "compileall" in run]
    assert compiles, "the builder does not compile the project's bytecode"
    for run in compiles:
        done = subprocess.run(shlex.split(local(run)), cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

    # The final stage's environment, as a container of the image has it; its user may not
    # write bytecode into the root-owned checkout, so no process here writes any either.
    home = tmp_path / "home"
    run_env = _clean_env(HOME=str(home), PREFECT_HOME=str(home / ".prefect"),
                         XDG_CACHE_HOME=str(home / ".cache"), PYTHONDONTWRITEBYTECODE="1",
                         **{k: local(v).replace("$PATH", os.environ["PATH"])
                            for k, v in final.env().items()})
    judgeflow = venv / "bin" / "judgeflow"
    helped = subprocess.run([judgeflow, "--help"], cwd=workdir, env=run_env,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "evaluate" in helped.stdout, helped.stderr[-3000:]
    where = subprocess.run([venv / "bin" / "python", "-c", "import flows; print(flows.__file__)"],
                           cwd=tmp_path, env=run_env, capture_output=True, text=True)
    assert Path(where.stdout.strip()).parent.parent == workdir  # the image's checkout
    # A flow run there starts from the builder's bytecode, compiling no project module.
    started = subprocess.run(
        [venv / "bin" / "python", "-v", "-c", "import flows.commands.evaluate, flows.evaluate"],
        cwd=workdir, env=run_env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-3000:]
    from_source = [line for line in started.stderr.splitlines()
                   if line.startswith(f"# code object from {workdir}")]
    assert not from_source, from_source[:5]
    assert f"# code object from '{workdir}/flows/" in started.stderr

    output = tmp_path / "results"
    judged = subprocess.run(
        [judgeflow, "evaluate", "examples/rag_eval.jsonl", "--judge-model",
         "judgeflow/offline", "--output", str(output), "--suite", "image"],
        cwd=workdir, env=run_env, capture_output=True, text=True, timeout=300)
    assert judged.returncode == 0, judged.stdout[-3000:] + judged.stderr[-3000:]
    [manifest] = output.glob("image/*/manifest.json")
    assert json.loads(manifest.read_text())["status"] == "complete"


# --------------------------------------------------------------------- the deployment file


def _shard(path: Path) -> dict:
    [shard] = [d for d in yaml.safe_load(path.read_text())["deployments"] if d["name"] == SHARD]
    return shard


def test_the_docker_shard_deployment_runs_what_the_process_one_runs():
    docker, process = _shard(DOCKER_YAML), _shard(PREFECT_YAML)
    for key in ("entrypoint", "tags"):
        assert docker[key] == process[key]
    assert "parameters" not in docker and "parameters" not in process  # the parent sends them
    # Neither carries job variables: the locked pools fix the job (deployments/pools/).
    assert "job_variables" not in docker["work_pool"]
    assert "job_variables" not in process["work_pool"]
    assert docker["work_pool"]["name"] == "judgeflow-docker"

    config = yaml.safe_load(DOCKER_YAML.read_text())
    assert config["prefect-version"] == yaml.safe_load(PREFECT_YAML.read_text())["prefect-version"]
    _, final = _builder_and_final()
    [pull] = config["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == \
        final.args("WORKDIR")[-1]
    # The image's entrypoint loads the file the locked pool mounts, from the image's checkout.
    [entrypoint] = final.args("ENTRYPOINT")
    script = json.loads(entrypoint)[-1]
    assert script.startswith(final.args("WORKDIR")[-1] + "/")
    assert (REPO / script.removeprefix(final.args("WORKDIR")[-1] + "/")) == ENTRYPOINT_SCRIPT
    template = locked_template("docker", "registry.example.com/judgeflow:test")
    machine_file = "/etc/judgeflow/judgeflow.env"
    assert template["job_configuration"]["volumes"] == [f"{machine_file}:{SECRETS}:ro"]
    assert SECRETS in ENTRYPOINT_SCRIPT.read_text()


def test_the_entrypoint_loads_the_machine_s_file_over_the_container_s_environment(tmp_path):
    secrets = tmp_path / "judgeflow.env"
    secrets.write_text("JUDGEFLOW_WRITE_ROOTS=s3://eval-results/judgeflow\n"
                       "JUDGEFLOW_SIGNING_KEY=from-the-machine\n")
    script = tmp_path / "entrypoint.sh"
    script.write_text(ENTRYPOINT_SCRIPT.read_text().replace(SECRETS, str(secrets)))
    probe = ["sh", str(script), "sh", "-c",
             'printf "%s|%s|%s" "$JUDGEFLOW_WRITE_ROOTS" "$JUDGEFLOW_SIGNING_KEY" "$1"', "-",
             "arg"]
    # A value a job put in the container's environment does not win over the machine's file.
    env = {"PATH": os.environ["PATH"], "JUDGEFLOW_SIGNING_KEY": ""}
    done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
    assert done.stdout == "s3://eval-results/judgeflow|from-the-machine|arg"
    secrets.unlink()  # no file: the command runs with the environment it was given
    done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
    assert done.stdout == "||arg"


def _put_pool(server: Server, pool: str, template: dict) -> None:
    """Create the work pool of type docker, or give the existing one this template."""
    with server.client() as api:
        created = api.post("/work_pools/", json={"name": pool, "type": "docker",
                                                 "base_job_template": template})
        if created.status_code == 409:
            api.patch(f"/work_pools/{pool}", json={"base_job_template": template}
                      ).raise_for_status()
        else:
            created.raise_for_status()


def _deploy(env: dict[str, str]) -> None:
    """`prefect deploy` of deployments/docker.yaml."""
    done = subprocess.run([BIN / "prefect", "--no-prompt", "deploy", "--all", "--prefect-file",
                           DOCKER_YAML], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)
    output = done.stdout + done.stderr
    # prefect deploy skips a deployment that fails validation with only a yellow warning.
    assert done.returncode == 0 and "validation errors" not in output, output[-4000:]
    assert output.count("successfully created") == 1, output[-4000:]


def test_the_docker_deployment_deploys_on_the_locked_pool_and_its_containers_get_no_secret(
        server: Server):
    pool = yaml.safe_load(DOCKER_YAML.read_text())["deployments"][0]["work_pool"]["name"]
    image = "registry.example.com/judgeflow:test"
    # The locked template, checked against prefect-docker's variable names (tests/docker_pool).
    template = locked_template("docker", image)
    assert set(template["job_configuration"]) <= set(DockerJobConfiguration.model_fields)
    # A pool as Prefect's defaults make it (every field a job variable): the deploy locks it.
    _put_pool(server, pool, DockerShapedWorker.get_default_base_job_template())
    _deploy({**server.env, "JUDGEFLOW_IMAGE": image})
    with server.client() as api:
        stored = api.get(f"/work_pools/{pool}").raise_for_status().json()["base_job_template"]
    assert stored == template

    with server.client() as api:
        deployment = api.get(f"/deployments/name/{SHARD}/{SHARD}").raise_for_status().json()
    assert deployment["work_pool_name"] == pool
    assert deployment["entrypoint"] == "flows.shards.flow.judge_shard"
    assert deployment["pull_steps"] == [{"prefect.deployments.steps.set_working_directory":
                                         {"directory": "/opt/judgeflow"}}]
    assert not deployment["job_variables"]

    # What the Docker worker starts each container with: the pool's image and mount of the
    # machine's file; no key, and no environment from the server but Prefect's own settings.
    resolved = server.run(BIN / "python", "-m", "tests.docker_pool", pool, f"{SHARD}/{SHARD}")
    job = json.loads(resolved.stdout.strip().splitlines()[-1])
    assert job["image"] == image and job["image_pull_policy"] == "IfNotPresent"
    assert job["env"] == {}  # the heartbeat is the image's (below), the rest the machine's
    _, final = _builder_and_final()
    assert final.env()["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    assert job["volumes"] == [f"/etc/judgeflow/judgeflow.env:{SECRETS}:ro"]
    assert job["command"] is None and job["privileged"] is False


# ----------------------------------------------------------------------------- the image


def _no_daemon_reason() -> str | None:
    """Why no image can be built here, or None when a Docker daemon answers."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode == 0:
        return None
    said = (info.stderr.strip().splitlines() or ["(nothing)"])[-1]
    try:
        socket.getaddrinfo("registry-1.docker.io", 443)
        hub = "Docker Hub resolves"
    except OSError:
        hub = ("and registry-1.docker.io does not resolve, so the base image could not be "
               "pulled either")
    daemon = ("no dockerd is installed" if shutil.which("dockerd") is None
              else "dockerd is installed but not running")
    return f"`docker info` failed ({said}): {daemon}, {hub}"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image, built where a daemon answers (DOCKER_HOST is honoured), removed afterwards.

    JUDGEFLOW_TEST_PYTHON_IMAGE names a stand-in for python:3.11-slim where no registry is
    reachable, JUDGEFLOW_TEST_DOCKER_NETWORK the network the build's installs use (e.g. host,
    for a daemon without a bridge).
    """
    reason = _no_daemon_reason()
    if reason:
        pytest.skip(reason)
    tag = f"judgeflow-worker-test:{uuid.uuid4().hex[:12]}"
    build = ["docker", "build", "-t", tag]
    if base := os.environ.get("JUDGEFLOW_TEST_PYTHON_IMAGE"):
        build += ["--build-arg", f"PYTHON_IMAGE={base}"]
    if network := os.environ.get("JUDGEFLOW_TEST_DOCKER_NETWORK"):
        build += ["--network", network]
    built = subprocess.run([*build, str(REPO)], capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


def test_the_image_runs_judgeflow_offline_as_a_non_root_user_without_a_compiler(image: str):
    def run(*command: str) -> str:
        # No network at all: the offline judge and the temporary Prefect API need none.
        done = subprocess.run(["docker", "run", "--rm", "--network", "none", image, *command],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    assert "evaluate" in run("judgeflow", "--help")
    assert run("id", "-u").strip() == "10001"
    assert run("sh", "-c", "command -v gcc cc make uv || true").strip() == ""
    judged = run("sh", "-c", "judgeflow evaluate examples/rag_eval.jsonl --judge-model "
                 "judgeflow/offline --output ./results --suite image >/dev/null && "
                 "cat results/image/*/manifest.json")
    assert json.loads(judged)["status"] == "complete"


def _docker_worker_prefect() -> Path:
    """The `prefect` of an environment with prefect-docker (not a judgeflow dependency)."""
    found = os.environ.get("JUDGEFLOW_TEST_DOCKER_WORKER")
    if not found:
        pytest.skip("no Docker worker: set JUDGEFLOW_TEST_DOCKER_WORKER to the prefect "
                    "command of an environment with prefect-docker installed")
    return Path(found)


def test_docker_workers_run_a_sharded_run_s_shards_in_the_image(server: Server, image: str,
                                                                 tmp_path):
    worker_prefect = _docker_worker_prefect()
    config = yaml.safe_load(DOCKER_YAML.read_text())
    pool = config["deployments"][0]["work_pool"]["name"]
    signing_key = f"docker-signing-{uuid.uuid4().hex}"
    # The locked pool, with the machine's file (keys, write roots) and the run's folder
    # mounted from tmp instead of /etc/judgeflow (a test does not write there).
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # the container's user is 10001
    machine_file = tmp_path / "judgeflow.env"
    machine_file.write_text(f"{SIGNING_KEY_ENV}={signing_key}\n{WRITE_ROOTS_ENV}={out}\n")
    machine_file.chmod(0o644)
    template = locked_template("docker", image)
    template["job_configuration"]["volumes"] = [f"{machine_file}:{SECRETS}:ro", f"{out}:{out}"]
    _put_pool(server, pool, template)
    env = dict(server.env)
    _deploy({**env, "JUDGEFLOW_IMAGE": image})
    # The deploy locked the pool again, with the machine's file at /etc/judgeflow: put the
    # test's mounts back.
    _put_pool(server, pool, template)
    workers = [subprocess.Popen([worker_prefect, "worker", "start", "--pool", pool, "--type",
                                 "docker", "--limit", "1", "--name", f"docker-worker-{n}"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for n in (1, 2)]
    try:
        done = subprocess.run(
            [BIN / "judgeflow", "evaluate", "examples/rag_eval.jsonl", "--judge-model",
             "judgeflow/offline", "--output", str(out), "--suite", "docker", "--shards", "2",
             "--chunk-size", "3"], cwd=REPO, env={**env, SIGNING_KEY_ENV: signing_key},
            capture_output=True, text=True, timeout=900, preexec_fn=lambda: os.umask(0))
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [manifest] = [json.loads(p.read_text()) for p in out.glob("docker/*/manifest.json")]
    assert manifest["status"] == "complete"
    assert manifest["shards"]["work_pool"] == pool
    assert {run["state"] for run in manifest["shards"]["runs"]} == {"COMPLETED"}
    assert {run["worker"] for run in manifest["shards"]["runs"]} == {
        "docker-worker-1", "docker-worker-2"}
    # The shards signed their chunks with the key their containers read from the machine's
    # file: the parent accepted every one.
    assert manifest["integrity"]["signing"] == "hmac-sha256"
    assert manifest["integrity"]["rejected_chunks"] == 0
