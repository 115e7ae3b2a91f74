"""Shared test settings: hypothesis profiles sized for CI; librdkafka's mock cluster."""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

# CI reports a failing example as found: shrinking it can take minutes on two cores.
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="module")
def kafka():
    """A bootstrap address of librdkafka's mock cluster (inside the confluent-kafka wheel), one
    cluster per test module."""
    pytest.importorskip("confluent_kafka")
    from splice.connectors.kafka_source import mock_cluster

    handle, bootstrap = mock_cluster()
    yield bootstrap
    del handle
