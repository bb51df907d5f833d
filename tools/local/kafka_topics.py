"""Kafka topics through confluent-kafka's admin client: create one when missing, check an existing one.

:func:`ensure_topic` serves the local broker (:meth:`tools.local.kafka_broker.LocalKafka.create_topic`) and
the Kafka feed (:mod:`tools.feed.kafka`) alike, on any cluster its client settings reach. :data:`QUIET` keeps
librdkafka's own log lines off standard error; :class:`KafkaLocalError` is the error of the local Kafka tools.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["QUIET", "KafkaLocalError", "check_partitions", "ensure_topic"]

#: librdkafka client settings that keep its own log lines (connection refused, retries) off stderr: failures
#: reach the caller as exceptions and delivery reports instead.
QUIET = {"log_level": 0}


class KafkaLocalError(RuntimeError):
    """The local broker cannot be started, reached or stopped; the message says why and what to do."""


def check_partitions(partitions: object) -> int:
    """``partitions`` as a topic's partition count, else a ValueError: an integer >= 1 (a bool is none).

    >>> check_partitions(4)
    4
    >>> check_partitions(0)
    Traceback (most recent call last):
    ...
    ValueError: partitions must be an integer >= 1, got 0
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        msg = f"partitions must be an integer >= 1, got {partitions!r}"
        raise ValueError(msg)
    return partitions


def ensure_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int | None,
    *,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    client_config: Mapping[str, Any] | None = None,
) -> tuple[int, bool]:
    """Create a topic if it is missing; check the partition count of an existing one.

    Parameters
    ----------
    bootstrap_servers : str
        ``HOST:PORT[,HOST:PORT...]``.
    name : str
        The topic.
    partitions : int or None
        The wanted partition count (>= 1). None accepts an existing topic's count; a missing topic then
        cannot be created (ValueError).
    config : mapping of str to str, optional
        Topic configuration for a topic created here (e.g. ``{"message.timestamp.type": "CreateTime"}``).
        An existing topic's configuration is not changed.
    timeout : float, default 30.0
        Seconds for each admin request.
    client_config : mapping, optional
        More confluent-kafka (librdkafka) settings of the admin client: security (``security.protocol``,
        ``sasl.*``, ``ssl.*``) and the like. Its ``bootstrap.servers`` is ``bootstrap_servers``.

    Returns
    -------
    tuple of (int, bool)
        The topic's partition count, and whether it was created by this call.

    Raises
    ------
    ValueError
        If the name or partition count is invalid, or the topic exists with another partition count.
    KafkaLocalError
        If the broker cannot be reached or refuses the topic.

    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if not isinstance(name, str) or not name or len(name) > 249:
        msg = f"a topic name must be 1 to 249 characters, got {name!r}"
        raise ValueError(msg)
    if partitions is not None:
        check_partitions(partitions)
    admin = _TopicAdmin(bootstrap_servers, client_config, timeout)
    count = admin.partition_count(name)
    if count is not None:
        return _checked(name, bootstrap_servers, count, partitions)
    if partitions is None:
        msg = f"topic {name!r} does not exist on {bootstrap_servers}; give its partition count to create it"
        raise ValueError(msg)
    new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    future = admin.client.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[name]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # created meanwhile by someone else
            count = admin.partition_count(name)
            if count is not None:
                return _checked(name, bootstrap_servers, count, partitions)
        msg = f"cannot create topic {name!r} on {bootstrap_servers}: {error.str()}"
        raise KafkaLocalError(msg) from None
    admin.wait_for_leaders(name, partitions)
    return partitions, True


def _checked(name: str, bootstrap_servers: str, count: int, partitions: int | None) -> tuple[int, bool]:
    """An existing topic's ``(count, False)``; a ValueError when it has not the ``partitions`` wanted."""
    if partitions is not None and count != partitions:
        msg = (
            f"topic {name!r} exists on {bootstrap_servers} with {count} partition(s), not {partitions}; "
            f"give --partitions {count} or use another topic"
        )
        raise ValueError(msg)
    return count, False


class _TopicAdmin:
    """An admin client that notes the broker's refusal of its login (librdkafka reports it by error_cb)."""

    def __init__(
        self, bootstrap_servers: str, client_config: Mapping[str, Any] | None, timeout: float
    ) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        refused: list[str] = []  # the broker's answer to a failed login

        def on_error(error: Any) -> None:  # holds the list only, not this object or its client
            if error.code() == KafkaError._AUTHENTICATION:
                refused.append(error.str())

        self.refused = refused
        settings = {**QUIET, **dict(client_config or {}), "bootstrap.servers": bootstrap_servers}
        try:
            self.client = AdminClient({**settings, "error_cb": on_error})
        except KafkaException as exc:
            msg = f"cannot configure the Kafka admin client: {exc.args[0].str()}"
            raise ValueError(msg) from None

    def metadata(self, name: str) -> Any:
        """The topic's metadata; a failed login fails at once (librdkafka would retry until the timeout)."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self.client.list_topics(
                    topic=name, timeout=max(0.05, min(0.5, deadline - time.monotonic()))
                )
            except KafkaException as exc:
                self.client.poll(0)  # serves error_cb
                if self.refused:
                    msg = f"Kafka at {self.bootstrap_servers} refused the client's login: {self.refused[0]}"
                    raise KafkaLocalError(msg) from None
                if time.monotonic() >= deadline:
                    msg = f"cannot reach Kafka at {self.bootstrap_servers}: {exc.args[0].str()}"
                    raise KafkaLocalError(msg) from None

    def partition_count(self, name: str) -> int | None:
        """The partition count of the topic, None when it does not exist."""
        from confluent_kafka import KafkaError

        topic = self.metadata(name).topics.get(name)
        if topic is None or (
            topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            return None
        if topic.error is not None:
            msg = f"topic {name!r} on {self.bootstrap_servers}: {topic.error.str()}"
            raise KafkaLocalError(msg)
        return len(topic.partitions)

    def wait_for_leaders(self, name: str, partitions: int) -> None:
        """Wait until the metadata shows every partition with a leader, so that producing starts at once."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            topic = self.client.list_topics(topic=name, timeout=self.timeout).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                if all(p.leader >= 0 for p in topic.partitions.values()):
                    return
            time.sleep(0.05)
        msg = (
            f"topic {name!r} on {self.bootstrap_servers}: a partition still lacks a leader after "
            f"{self.timeout} s"
        )
        raise KafkaLocalError(msg)
