"""The suite's configuration: its plugins and the property tests' profiles.

The plugins (``tests/plugins/``): :mod:`tests.plugins.tiers` (tiers, the markers derived from fixtures, the
fast tier's guard, the order the workers get the files), :mod:`tests.plugins.spark` (the worker's Spark
session, the options of the JVMs the tests start), :mod:`tests.plugins.services` (JVMs and servers as
processes, Airflow's home, the run's shared Kafka broker and S3 server, a Spark cluster), and
:mod:`tests.suite_costs` (what each test costs, against ``tests/budget.toml``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

pytest.register_assert_rewrite("tests.suite_costs", "tests.plugins")

pytest_plugins = ["tests.suite_costs", "tests.plugins.tiers", "tests.plugins.spark", "tests.plugins.services"]

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
#: pytest --fast's (unless HYPOTHESIS_PROFILE names one): the property tests with a third of the examples.
settings.register_profile("fast", parent=settings.get_profile("default"), max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
