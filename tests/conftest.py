import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test of the run."""
    from jobs.spark import build_session

    session = build_session("tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()
