"""The suite's pytest plugins (tests/conftest.py lists them)."""
