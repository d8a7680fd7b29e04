# The judgeflow worker image: what a Docker or Kubernetes worker runs a flow run in (the shard
# deployment of deployments/docker.yaml). Build from the repository root:
#
#   DOCKER_BUILDKIT=1 docker build -t registry.example.com/judgeflow:0.1.0 .
#   DOCKER_BUILDKIT=1 docker build --build-arg EXTRAS="--extra mlflow" -t registry.example.com/judgeflow:0.1.0-mlflow .
#
# Everything is installed from uv.lock, exactly (--frozen), and only from wheels (--no-build):
# no compiler in either stage. The final stage holds the interpreter of the base image, the
# virtualenv and the project; it runs as an unprivileged user. tests/test_worker_image.py runs
# the builder's install commands in a fresh virtualenv and checks the rest of this file.
# BuildKit (the default since Docker 23; DOCKER_BUILDKIT=1 with Debian's docker.io 20.10) keeps
# uv's download cache between builds (the RUN --mount lines); no frontend image is pulled.

# Both stages share the interpreter: the virtualenv points at the base image's python.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# The Makefile's UV_VERSION (the tests keep the two equal).
ARG UV_VERSION=0.13.9
# Optional extras of pyproject.toml, e.g. "--extra mlflow" to log runs to MLflow.
ARG EXTRAS=""
RUN pip install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}"
ENV UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
WORKDIR /opt/judgeflow
# The dependencies first, in a layer of their own: a code change does not reinstall them.
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-build --no-install-project --python /usr/local/bin/python3 $EXTRAS
# The project itself, installed editable: /opt/judgeflow is the checkout a run sees, the same
# path in both stages (relative paths of the deployments' parameters resolve there).
COPY README.md ./
COPY flows ./flows
COPY tasks ./tasks
COPY judges ./judges
COPY prompts ./prompts
COPY examples ./examples
COPY deployments ./deployments
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-build --python /usr/local/bin/python3 $EXTRAS
# The project's bytecode too: uv compiles only site-packages, and the final stage's user may
# not write it, so every flow run and shard would compile the project's 230 modules from source
# (0.3-0.6 s of CPU at each start). checked-hash: valid whatever COPY does to the files' times.
RUN /opt/venv/bin/python -m compileall -q --invalidation-mode checked-hash flows tasks judges

FROM ${PYTHON_IMAGE}
# A shard's heartbeat every 30 s, which its parent's liveness check reads: in the image, since
# the locked pools take no environment from a job (deployments/pools/).
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PYTHONUNBUFFERED=1 \
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30
RUN useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin judgeflow
# Code and virtualenv stay root's (a run cannot rewrite them); results/ is the user's.
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/judgeflow /opt/judgeflow
RUN install -d -o judgeflow -g judgeflow /opt/judgeflow/results
WORKDIR /opt/judgeflow
# Loads the machine's /etc/judgeflow/judgeflow.env when the locked Docker pool mounts it.
ENTRYPOINT ["/bin/sh", "/opt/judgeflow/deployments/pools/docker-entrypoint.sh"]
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001
CMD ["judgeflow", "--help"]
