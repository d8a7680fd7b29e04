"""Who sends a deployment run's heartbeats: Prefect's own only when they come often enough for
the crash automation's window (flows/run/heartbeat.py)."""

from __future__ import annotations

import pytest
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from flows.commands.automations import DEFAULT_HEARTBEAT_WINDOW_SECONDS
from flows.run.heartbeat import INTERVAL_ENV, heartbeat_seconds, prefect_sends_them_often_enough


def test_at_prefect_s_default_frequency_a_run_sends_its_own_heartbeats(monkeypatch):
    monkeypatch.delenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", raising=False)
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    # Prefect 3.8 sends one every 180 s unless told otherwise: a healthy night would fall
    # silent for longer than the automation's window and be marked Crashed.
    with temporary_settings(restore_defaults={PREFECT_FLOWS_HEARTBEAT_FREQUENCY}):
        assert not prefect_sends_them_often_enough()
    assert heartbeat_seconds() * 3 <= DEFAULT_HEARTBEAT_WINDOW_SECONDS


@pytest.mark.parametrize(("prefect_every", "ours", "prefect_is_enough"), [
    (30, "30", True), (30, "60", True), (60, "30", False), (180, "30", False)])
def test_prefect_s_heartbeats_replace_ours_only_when_at_least_as_frequent(
        monkeypatch, prefect_every, ours, prefect_is_enough):
    monkeypatch.setenv(INTERVAL_ENV, ours)
    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: prefect_every}):
        assert prefect_sends_them_often_enough() is prefect_is_enough
