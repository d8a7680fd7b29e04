"""Can the run publish where it was told to? Checked before judging, without writing anything.

A local folder: the nearest existing ancestor must be a folder we may write in (the run creates
the rest). S3: credentials must resolve and the endpoint must answer for the bucket. Nothing is
listed and nothing is written, so a least-privilege writer (PutObject only) passes; the check
refuses only what certainly cannot work.
"""

from __future__ import annotations

import os
from pathlib import Path

from judges.errors import ConfigError
from judges.storage import check_storage_options, check_url, is_local, split_protocol

S3_PROTOCOLS = ("s3", "s3a")
# A preflight must answer in seconds: one attempt, short timeouts.
S3_CONNECT_TIMEOUT_SECONDS = 3
S3_READ_TIMEOUT_SECONDS = 5
ENDPOINT_HINT = "pass --storage-option endpoint_url=http://HOST:PORT for MinIO or another S3 store"
CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where an instance "
    "or task role is available"
)


class OutputLocationError(ConfigError):
    """The output location cannot be written: the message names it and the fix."""


def check_output(url: str, storage_options: dict) -> None:
    """Refuse an output location that certainly cannot be published to.

    Raises:
        OutputLocationError: a local path blocked by a file or not writable; an S3 URL without
            credentials, with an endpoint that does not answer, or a bucket that does not exist.
    """
    protocol, path = split_protocol(check_url(url))
    check_storage_options(storage_options)
    if is_local(url):
        _check_local(url, Path(path).expanduser())
    elif protocol in S3_PROTOCOLS:
        _check_s3(url, path.split("/", 1)[0], storage_options)
    # Other fsspec stores: publishing reports their errors.


def _check_local(url: str, target: Path) -> None:
    existing = target.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputLocationError(
            f"cannot publish to {url!r}: {str(existing)!r} is a file, not a folder; choose "
            "another --output"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputLocationError(
            f"cannot publish to {url!r}: no permission to write in {str(existing)!r}; choose "
            "another --output or change the folder's permissions"
        )


def _endpoint(storage_options: dict) -> str | None:
    client_kwargs = storage_options.get("client_kwargs") or {}
    return storage_options.get("endpoint_url") or client_kwargs.get("endpoint_url")


def _s3_session(url: str, storage_options: dict):
    """A botocore session whose credentials resolve (unless anonymous access was asked for)."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        session = botocore.session.Session(profile=storage_options.get("profile"))
        if not storage_options.get("anon") and session.get_credentials() is None:
            raise OutputLocationError(f"no AWS credentials found for {url!r}: {CREDENTIALS_HINT}")
    except BotoCoreError as error:  # a missing profile, a broken config or credential process
        raise OutputLocationError(
            f"cannot resolve AWS credentials for {url!r} ({error}): {CREDENTIALS_HINT}"
        ) from None
    return session


def _check_s3(url: str, bucket: str, storage_options: dict) -> None:
    # botocore comes with s3fs; imported here so that local runs never pay for it.
    import botocore
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

    session = _s3_session(url, storage_options)
    endpoint = _endpoint(storage_options)
    region = (storage_options.get("client_kwargs") or {}).get("region_name")
    config = Config(
        connect_timeout=S3_CONNECT_TIMEOUT_SECONDS,
        read_timeout=S3_READ_TIMEOUT_SECONDS,
        retries={"total_max_attempts": 1},
        **({"signature_version": botocore.UNSIGNED} if storage_options.get("anon") else {}),
    )
    client = session.create_client("s3", endpoint_url=endpoint, region_name=region, config=config)
    where = endpoint or "AWS S3"
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code"))
        if code in ("404", "NoSuchBucket"):
            raise OutputLocationError(
                f"cannot publish to {url!r}: bucket {bucket!r} does not exist at {where}; create "
                f"it or fix --output"
            ) from None
        # 403 and the like: a writer may lack bucket-level rights and still publish.
    except ParamValidationError as error:
        raise OutputLocationError(f"cannot publish to {url!r}: {error}") from None
    except BotoCoreError as error:
        raise OutputLocationError(
            f"cannot publish to {url!r}: the S3 endpoint {where} does not answer ({error}); "
            f"check the network, or {ENDPOINT_HINT}"
        ) from None
