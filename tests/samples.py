"""The sample data and the instants the tests share: one place for the bundled recordings' paths.

>>> IOT.name, IOT_D2.name, TAXI.name
('ooo-iot-d1.csv', 'ooo-iot-d2.csv', 'debs2015-taxi-sample.csv')
>>> BASE_MS  # 2020-09-13T12:26:40Z: the landing tests' first instant
1600000000000
"""

from pathlib import Path

#: The repository's root.
ROOT = Path(__file__).resolve().parents[1]
#: The bundled recordings (samples/README.md says where each comes from).
SAMPLES = ROOT / "samples"
#: The IoT recordings (semicolon-separated; event time ``S.Client.Detection.Time``, arrival time
#: ``S.Message.received.time.ms``, partition ``S.Device.ID``).
IOT = SAMPLES / "ooo-iot-d1.csv"
IOT_D2 = SAMPLES / "ooo-iot-d2.csv"
#: The command line's flags that read :data:`IOT`'s times (``awm replay``, ``compare``, ``tune``) ...
IOT_TIMES = [
    "--delimiter",
    ";",
    "--event-time",
    "S.Client.Detection.Time",
    "--arrival-time",
    "S.Message.received.time.ms",
]
#: ... and its partition (``awm feed``).
IOT_FLAGS = [*IOT_TIMES, "--partition", "S.Device.ID"]
#: The DEBS 2015 taxi sample.
TAXI = SAMPLES / "debs2015-taxi-sample.csv"
#: The first event time of the tests' hand-written landing records.
BASE_MS = 1_600_000_000_000
