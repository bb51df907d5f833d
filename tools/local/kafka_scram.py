"""SCRAM users of the local Kafka broker: their checks, their credentials, the SASL listener's settings.

**SCRAM users** (``--sasl-scram USER:PASSWORD``, repeatable; ``LocalKafka(scram_users={...})``) add a second
client listener, ``SASL_PLAINTEXT`` on ``--sasl-port`` (default: the client port + 1; from Python a free
port), with ``sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512``. Each user's credentials, for both
mechanisms, are written through the admin API (``AlterUserScramCredentials``, as ``kafka-configs --alter
--add-config`` does) over the plaintext listener once the broker answers, and the start waits until a
client logs in as the first user on the SASL listener. So a fresh directory and an existing one behave
alike: the users given are created or their passwords replaced; users of earlier starts stay in the
metadata (KRaft keeps them) until the directory is removed. The passwords are in no file, no command line
of the broker's and no output (``status`` names the users only); ``kafka-storage format --add-scram`` would
put them on the format command's line. The ``PLAINTEXT`` listener stays, unauthenticated (no authorizer):
the SASL listener is for testing clients' security settings, not a security boundary.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from tools.local.kafka_topics import QUIET, KafkaLocalError

__all__ = [
    "SCRAM_MECHANISMS",
    "add_scram_users",
    "check_scram_users",
    "sasl_listener_settings",
    "scram_client_config",
]

#: The SASL mechanisms of the SASL_PLAINTEXT listener; every SCRAM user gets credentials for both.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_ITERATIONS = 8192
#: A SCRAM user name: kept to characters that need no quoting in a JAAS line or a SCRAM message.
_SCRAM_USER = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def check_scram_users(users: Mapping[str, str] | None) -> dict[str, str]:
    """SCRAM users as ``{name: password}``, checked; a ValueError (naming the user, never the password).

    A name is 1 to 128 of ``A-Z a-z 0-9 . _ -``; a password is 1 to 1,024 characters without a double quote,
    a backslash or a line break (so that it fits a JAAS line ``password="..."`` as it is).

    >>> check_scram_users({"alice": "s3cret"})
    {'alice': 's3cret'}
    >>> check_scram_users({"al ice": "x"})
    Traceback (most recent call last):
    ...
    ValueError: a SCRAM user name is 1 to 128 of the characters A-Z a-z 0-9 . _ -, got 'al ice'
    """
    checked: dict[str, str] = {}
    for name, password in dict(users or {}).items():
        if not isinstance(name, str) or not _SCRAM_USER.match(name):
            msg = f"a SCRAM user name is 1 to 128 of the characters A-Z a-z 0-9 . _ -, got {name!r}"
            raise ValueError(msg)
        if (
            not isinstance(password, str)
            or not 1 <= len(password) <= 1024
            or any(c in password for c in '"\\\r\n')
        ):
            msg = (
                f"the password of SCRAM user {name!r} must be 1 to 1024 characters without a double quote, "
                "a backslash or a line break"
            )
            raise ValueError(msg)
        checked[name] = password
    return checked


def scram_client_config(
    bootstrap_servers: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> dict[str, str]:
    """The confluent-kafka settings of a client that logs in as ``user`` on a SASL_PLAINTEXT listener.

    >>> sorted(scram_client_config("127.0.0.1:9093", "alice", "x"))
    ['bootstrap.servers', 'sasl.mechanism', 'sasl.password', 'sasl.username', 'security.protocol']
    """
    return {
        "bootstrap.servers": bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def sasl_listener_settings() -> dict[str, object]:
    """The broker's settings of the SASL_PLAINTEXT listener's SCRAM mechanisms.

    The broker's side of SCRAM needs a JAAS entry per mechanism, without credentials (it checks those in its
    metadata).

    >>> sasl_listener_settings()["sasl.enabled.mechanisms"]
    'SCRAM-SHA-256,SCRAM-SHA-512'
    """
    sasl: dict[str, object] = {"sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS)}
    for mechanism in SCRAM_MECHANISMS:
        key = f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"
        sasl[key] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return sasl


def add_scram_users(bootstrap_servers: str, users: Mapping[str, str], deadline: float) -> None:
    """Create the SCRAM users, or replace their passwords, for every mechanism (over PLAINTEXT).

    Each request may take until ``deadline`` (``time.monotonic()``), and at least 1 s.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    kinds = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **QUIET})
    for mechanism in SCRAM_MECHANISMS:  # the broker takes one alteration per user in a request
        alterations = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(kinds[mechanism], _SCRAM_ITERATIONS), password.encode("utf-8")
            )
            for user, password in sorted(users.items())
        ]
        timeout = max(1.0, deadline - time.monotonic())
        futures = admin.alter_user_scram_credentials(alterations, request_timeout=timeout)
        for user, future in futures.items():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                msg = f"cannot set the {mechanism} credentials of user {user!r}: {exc.args[0].str()}"
                raise KafkaLocalError(msg) from None
