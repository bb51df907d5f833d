#!/usr/bin/env bash
# Regenerates the tables of docs/performance.md ("Tables"): every strategy of the default grid on the three
# bundled streams, tumbling windows of 100 and 1,000 ms (the seed paper's window sizes). Usage: docs/compare_samples.sh > tables.md
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
IOT=(--delimiter ';' --event-time S.Client.Detection.Time --arrival-time S.Message.received.time.ms)
echo "### IoT d1 (samples/ooo-iot-d1.csv, 9,600 events)"; echo
$PY -m watermark compare samples/ooo-iot-d1.csv "${IOT[@]}" --window-ms 100,1000 2>/dev/null; echo
echo "### IoT d2 (samples/ooo-iot-d2.csv, 10,800 events)"; echo
$PY -m watermark compare samples/ooo-iot-d2.csv "${IOT[@]}" --window-ms 100,1000 2>/dev/null; echo
echo "### DEBS 2015 taxi sample (samples/debs2015-taxi-sample.csv, 10,004 trips)"; echo
$PY -m watermark compare samples/debs2015-taxi-sample.csv --no-header --time-format iso --event-time 2 \
    --arrival-time 3 --window-ms 100,1000 2>/dev/null
