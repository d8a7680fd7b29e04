#!/bin/sh
# The worker image's entrypoint: the operator's settings and keys from the machine's own file.
#
# judgeflow's locked Docker pool (deployments/pools/docker.json) mounts the Docker machine's
# /etc/judgeflow/judgeflow.env read-only at /run/secrets/judgeflow.env: the keys stay on that
# machine, never on the Prefect server (where whoever reaches its API could read a Secret block
# or a job variable). Its lines are NAME=value (provider keys, JUDGEFLOW_SIGNING_KEY,
# JUDGEFLOW_WRITE_ROOTS, ...). Read after the container's own environment, so a name it sets
# wins over anything a job put there. Without the file the command runs as given.
set -e
secrets=/run/secrets/judgeflow.env
if [ -f "$secrets" ]; then
    set -a
    . "$secrets"
    set +a
fi
exec "$@"
