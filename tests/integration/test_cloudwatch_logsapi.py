"""CloudWatch Logs without a boto3 client (sinks/cloudwatch/logsapi.py): botocore's
credential chain, SigV4 signer and endpoint rules, against moto server over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination, SendError
from podgpu.sinks.cloudwatch.logsapi import LogsApi, error_code
from tests.integration.aws_fakes import aws_env, free_port, moto_server, moto_url, read_events

__all__ = ["aws_env", "moto_url"]  # fixtures
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("aws_env")]


def test_creates_group_and_stream_then_delivers_in_order(moto_url: str) -> None:
    d = CloudWatchDestination(log_group="/lean/a", log_stream="s1", region="us-east-1",
                              endpoint_url=moto_url)
    now = int(time.time() * 1000)
    batch = [(now, json.dumps({"n": i})) for i in range(3)]
    assert d.send(batch) == 0
    assert d.send([(now + 1, '{"n": 3}')]) == 0  # the stream exists now: one call
    assert [e["message"] for e in read_events(moto_url, "/lean/a", "s1")] == \
        [m for _, m in batch] + ['{"n": 3}']
    d.close()


def test_a_missing_group_with_creation_off_is_an_auth_kind_failure(moto_url: str) -> None:
    d = CloudWatchDestination(log_group="/lean/absent", log_stream="s", region="us-east-1",
                              endpoint_url=moto_url, create_log_group=False)
    with pytest.raises(SendError, match="creating it is off") as info:
        d.send([(int(time.time() * 1000), "{}")])
    assert info.value.retryable and info.value.auth


def test_nothing_listening_is_retryable() -> None:
    d = CloudWatchDestination(log_group="/g", log_stream="s", region="us-east-1",
                              endpoint_url=f"http://127.0.0.1:{free_port()}", timeout=2.0)
    with pytest.raises(SendError, match="Could not connect") as info:
        d.send([(0, "{}")])
    assert info.value.retryable and not info.value.auth


def test_no_credentials_anywhere_is_reported_as_credentials(
        moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance to ask here
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    d = CloudWatchDestination(log_group="/g", log_stream="s", region="us-east-1",
                              endpoint_url=moto_url)
    with pytest.raises(SendError, match="credentials or permissions: Unable to locate") as info:
        d.send([(0, "{}")])
    assert info.value.auth


def test_the_endpoint_comes_from_botocores_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LogsApi(region="eu-west-1", endpoint_url=None).url == \
        "https://logs.eu-west-1.amazonaws.com"
    assert LogsApi(region="cn-north-1", endpoint_url=None).url.endswith(".amazonaws.com.cn")
    monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", "true")
    assert LogsApi(region="us-east-1", endpoint_url=None).url == \
        "https://logs-fips.us-east-1.amazonaws.com"


def test_a_configured_endpoint_is_read_as_boto3_reads_it(monkeypatch: pytest.MonkeyPatch,
                                                         moto_url: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # global: the service one wins
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", moto_url)
    d = CloudWatchDestination(log_group="/lean/env", log_stream="s", region="us-east-1")
    assert d.send([(int(time.time() * 1000), '{"via": "env"}')]) == 0  # reached moto
    assert [e["message"] for e in read_events(moto_url, "/lean/env", "s")] == ['{"via": "env"}']
    assert LogsApi(region="us-east-1", endpoint_url="http://explicit:1").url == \
        "http://explicit:1"  # --emf-endpoint-url wins over the environment
    monkeypatch.delenv("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS")
    assert LogsApi(region="us-east-1", endpoint_url=None).url == "http://127.0.0.1:9"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert LogsApi(region="us-east-1", endpoint_url=None).url == \
        "https://logs.us-east-1.amazonaws.com"


def test_no_region_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ConfigError, match="no region"):
        LogsApi(region=None, endpoint_url=None)


@pytest.mark.parametrize(("header", "body", "expect"), [
    ("", {"__type": "com.amazonaws.logs#ThrottlingException", "message": "Rate exceeded"},
     ("ThrottlingException", "Rate exceeded")),
    ("AccessDeniedException:http://internal.amazon.com/", None, ("AccessDeniedException", "")),
    ("", {"__type": "ResourceNotFoundException", "Message": "gone"},
     ("ResourceNotFoundException", "gone")),
])
def test_error_codes_as_botocore_reads_them(header: str, body: object,
                                            expect: tuple[str, str]) -> None:
    assert error_code(header, body) == expect


@pytest.fixture
def moto_with_auth() -> Iterator[tuple[str, dict[str, str]]]:
    """A moto server that checks SigV4 signatures and IAM policies after its first 3 calls
    (INITIAL_NO_AUTH_ACTION_COUNT), which create an IAM user allowed logs:*; yields the URL and
    that user's key."""
    import boto3

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="3") as url:
        iam = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                    region_name="us-east-1").client("iam", endpoint_url=url)
        iam.create_user(UserName="node")
        key = iam.create_access_key(UserName="node")["AccessKey"]
        iam.put_user_policy(UserName="node", PolicyName="logs", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "logs:*", "Resource": "*"}]}))
        yield url, {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                    "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


def test_the_signature_is_what_aws_checks(moto_with_auth: tuple[str, dict[str, str]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """moto recomputes SigV4 from the IAM user's secret: the right key is accepted, a wrong
    secret is SignatureDoesNotMatch, reported as a credentials failure."""
    url, key = moto_with_auth
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    for k, v in key.items():
        monkeypatch.setenv(k, v)
    d = CloudWatchDestination(log_group="/signed", log_stream="s", region="us-east-1",
                              endpoint_url=url)
    assert d.send([(int(time.time() * 1000), '{"ok": 1}')]) == 0
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    bad = CloudWatchDestination(log_group="/signed", log_stream="s", region="us-east-1",
                                endpoint_url=url)
    with pytest.raises(SendError, match="SignatureDoesNotMatch") as info:
        bad.send([(int(time.time() * 1000), '{"ok": 2}')])
    assert info.value.auth and info.value.retryable
