# Shared set-up for bin/run and bin/test (sourced, not executed): Python 3.11, Java 17, the project's
# virtualenv .venv with the pinned dependencies of requirements.lock, and the Debian packages later parts need.
# Safe to run again: it reinstalls only when pyproject.toml or requirements.lock changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

APT_UPDATED=0
apt_install() {  # apt_install PACKAGE... : install Debian packages that are missing (needs root)
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "Debian packages missing (${missing[*]}); run as root or install them"
    if [ "$APT_UPDATED" -eq 0 ]; then say "apt-get update"; apt-get update -qq; APT_UPDATED=1; fi
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: this project needs Python 3.11 (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || die "$PYTHON is not Python 3.11"

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
    say "Java 17 not found (Spark needs it): installing openjdk-17-jre-headless"
    apt_install openjdk-17-jre-headless
fi
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
# Monitoring: promtool checks the alert rules, amtool the Alertmanager configuration, and the tests run a real
# Prometheus, Pushgateway and Alertmanager.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-pushgateway >/dev/null 2>&1 \
    || ! command -v prometheus-alertmanager >/dev/null 2>&1; then
    say "Prometheus not found (monitoring tests need prometheus, promtool, the Pushgateway and Alertmanager): installing"
    apt_install prometheus prometheus-pushgateway prometheus-alertmanager
fi
# Airflow's real-scheduler test runs its metadata DB on PostgreSQL (initdb/pg_ctl of the Debian package).
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    say "PostgreSQL not found (the Airflow scheduler test runs one): installing postgresql"
    apt_install postgresql
fi

STAMP_FILE=.venv/.installed
STAMP="$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    "$PYTHON" -m venv .venv
fi
if [ "$(cat "$STAMP_FILE" 2>/dev/null)" != "$STAMP" ]; then
    say "installing pinned dependencies into .venv (first run: about a minute)"
    .venv/bin/python -m pip install -q --disable-pip-version-check uv==0.13.8
    .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode -r requirements.lock
    .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
    echo "$STAMP" > "$STAMP_FILE"
fi
export PATH="$ROOT/.venv/bin:$PATH"

# JVM jars (infra/jvm/pom.xml): delta-spark and the Spark Kafka source for the Spark session (spark.jars),
# the Kafka broker for bin/kafka-local. Fetched from Maven Central into .jvm/ only when a pom changed.
JVM_STAMP_FILE=.jvm/.installed
JVM_STAMP="$(cat infra/jvm/settings.xml infra/jvm/pom.xml infra/jvm/*/pom.xml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$JVM_STAMP_FILE" 2>/dev/null)" != "$JVM_STAMP" ]; then
    command -v mvn >/dev/null 2>&1 || { say "Maven not found: installing maven"; apt_install maven; }
    say "fetching the JVM jars (delta-spark, Spark Kafka source, Kafka broker) with Maven into .jvm/"
    rm -rf .jvm
    mvn -q -B -Dstyle.color=never -s infra/jvm/settings.xml -f infra/jvm/pom.xml dependency:copy-dependencies \
        || die "Maven could not fetch the jars of infra/jvm/pom.xml (is Maven Central reachable?)"
    echo "$JVM_STAMP" > "$JVM_STAMP_FILE"
fi
export AWM_JARS_DIR="${AWM_JARS_DIR:-$ROOT/.jvm/spark}"

# Built once, not during a run (tools/local/prebuild.py): the class archive of Spark's driver classes that the
# test suite's JVMs map instead of loading them (out/jvm-cds/), and numba's watermark kernels compiled into
# watermark/strategies/__pycache__. Again only when the virtualenv, the jars, the kernels or the maker changed.
PREBUILD_STAMP_FILE=out/prebuild.stamp
PREBUILD_STAMP="$(printf '%s %s ' "$STAMP" "$JVM_STAMP"; cat watermark/strategies/*_kernel.py tools/local/prebuild.py | sha256sum | cut -d' ' -f1)"
# Made again too when what it made is gone (out/jvm-cds/ or watermark/strategies/__pycache__ removed by hand or a clean).
prebuilt() { ls out/jvm-cds/*.jsa watermark/strategies/__pycache__/*_kernel.*.nbi >/dev/null 2>&1; }
if [ "$(cat "$PREBUILD_STAMP_FILE" 2>/dev/null)" != "$PREBUILD_STAMP" ] || ! prebuilt; then
    say "building the class archive of Spark's classes and numba's kernels once (about a minute)"
    mkdir -p out
    python -m tools.local.prebuild
    echo "$PREBUILD_STAMP" > "$PREBUILD_STAMP_FILE"
fi
