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
from hypothesis.database import DirectoryBasedExampleDatabase

pytest.register_assert_rewrite("tests.suite_costs", "tests.plugins")

pytest_plugins = ["tests.suite_costs", "tests.plugins.tiers", "tests.plugins.spark", "tests.plugins.services"]

#: The suite's: the same examples every run (derandomized: seeded by each test's own code, no example
#: database), so that a run's cost and outcome are those of the run before on the same code: the suite's
#: report compares each file's CPU run to run, and a fuzz test replaying its database's examples first cost
#: three times what it cost the run before. Exploration is the "thorough" profile's.
settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: HYPOTHESIS_PROFILE=thorough: new examples every run, 1,000 a test, failures kept in .hypothesis/.
settings.register_profile(
    "thorough",
    parent=settings.get_profile("default"),
    max_examples=1000,
    derandomize=False,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
)
#: pytest --fast's (unless HYPOTHESIS_PROFILE names one): the property tests with a third of the examples.
settings.register_profile("fast", parent=settings.get_profile("default"), max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
