"""The JVM jars pinned in infra/jvm/pom.xml match the Python packages pinned in requirements.lock."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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


def _spark_pom_dependencies() -> dict[str, ET.Element]:
    root = ET.parse(ROOT / "infra" / "jvm" / "spark" / "pom.xml").getroot()
    deps = root.find("m:dependencies", NS)
    return {d.findtext("m:artifactId", namespaces=NS): d for d in deps}


def _pyspark_hadoop_version() -> str:
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert len(jars) == 1, f"expected one hadoop-client-api jar in pyspark's jars folder, found {jars}"
    return jars[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def test_hadoop_aws_is_the_hadoop_version_inside_the_installed_pyspark():
    # s3a's classes must match Spark's Hadoop client exactly (hadoop-aws of another release fails at run time
    # with NoSuchMethodError or a missing class).
    hadoop = _pyspark_hadoop_version()
    assert _properties()["hadoop.version"] == hadoop
    aws = _spark_pom_dependencies()["hadoop-aws"]
    assert aws.findtext("m:groupId", namespaces=NS) == "org.apache.hadoop"
    assert aws.findtext("m:version", namespaces=NS) == "${hadoop.version}"


def test_hadoop_aws_ships_without_the_aws_sdk_bundle():
    aws = _spark_pom_dependencies()["hadoop-aws"]
    excluded = {
        (e.findtext("m:groupId", namespaces=NS), e.findtext("m:artifactId", namespaces=NS))
        for e in aws.iter(f"{{{NS['m']}}}exclusion")
    }
    assert ("software.amazon.awssdk", "bundle") in excluded


def test_aws_sdk_modules_are_the_version_hadoop_aws_was_built_with():
    # hadoop-aws names the SDK (its bundle) through its parent pom, hadoop-project, which Maven keeps in the
    # local repository once bin/bootstrap.sh has resolved hadoop-aws.
    hadoop = _properties()["hadoop.version"]
    parent = (
        Path.home() / ".m2" / "repository" / "org" / "apache" / "hadoop" / "hadoop-project" / hadoop
    ) / f"hadoop-project-{hadoop}.pom"
    assert parent.is_file(), (
        f"{parent} missing: run bin/bootstrap.sh (Maven resolves hadoop-aws's parent pom)"
    )
    declared = (
        ET.parse(parent)
        .getroot()
        .find("m:properties", NS)
        .findtext("m:aws-java-sdk-v2.version", namespaces=NS)
    )
    assert _properties()["aws-sdk-v2.version"] == declared
    sdk = {
        a: d
        for a, d in _spark_pom_dependencies().items()
        if d.findtext("m:groupId", namespaces=NS) == "software.amazon.awssdk"
    }
    assert sdk, "no AWS SDK module in infra/jvm/spark/pom.xml"
    assert {a: d.findtext("m:version", namespaces=NS) for a, d in sdk.items()} == dict.fromkeys(
        sdk, "${aws-sdk-v2.version}"
    )
