"""The JVM jars pinned in infra/jvm/pom.xml match the Python packages pinned in requirements.lock."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _properties() -> dict[str, str]:
    root = ET.parse(ROOT / "infra" / "jvm" / "pom.xml").getroot()
    props = root.find("m:properties", NS)
    return {child.tag.split("}", 1)[1]: (child.text or "").strip() for child in props}


def _locked() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if re.match(r"^[A-Za-z0-9_.-]+==", line))


def test_spark_jars_are_the_version_of_the_locked_pyspark():
    locked = _locked()
    spark = _properties()["spark.version"]
    assert spark == locked["pyspark"] == locked["pyspark-client"]


def test_delta_jar_is_the_version_of_the_locked_delta_spark_built_for_that_spark():
    props = _properties()
    assert props["delta.version"] == _locked()["delta-spark"]
    minor = ".".join(props["spark.version"].split(".")[:2])
    assert props["delta.artifact"] == f"delta-spark_{minor}_2.13"
