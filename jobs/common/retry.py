"""The retry policy of the batch jobs' Delta commits: try again after a conflict, with backoff and jitter.

Delta's optimistic concurrency refuses a commit when another commit changed what it read
(:func:`delta_conflicts`; open-source Delta checks every table as ``Serializable``). The batch jobs run
such a commit again, or recompute it, under one policy (:class:`RetryPolicy`, built on tenacity): at most
``retries`` retries, retry ``n`` (1, 2, ...) after a random wait of up to ``backoff_s * 2 ** (n - 1)``
seconds, capped at :data:`MAX_WAIT_S` ("full jitter": concurrent writers that conflicted once do not meet
again in step). Each wait is logged as a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The longest wait before a retry, in seconds.
MAX_WAIT_S = 10.0


def delta_conflicts() -> tuple[type[BaseException], ...]:
    """delta-spark's write-conflict exceptions (the captured classes derive from these, not from one base)."""
    from delta import exceptions as e

    return (
        e.DeltaConcurrentModificationException,
        e.ConcurrentWriteException,
        e.MetadataChangedException,
        e.ProtocolChangedException,
        e.ConcurrentAppendException,
        e.ConcurrentDeleteReadException,
        e.ConcurrentDeleteDeleteException,
        e.ConcurrentTransactionException,
    )


def first_line(err: BaseException) -> str:
    r"""The first line of an error's message (Spark's run to many lines), or its type's name.

    >>> first_line(ValueError("conflict\n  at org.apache..."))
    'conflict'
    >>> first_line(RuntimeError())
    'RuntimeError'
    """
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``retries`` retries, each after a random wait (exponential backoff, full jitter).

    Before retry ``n`` (1, 2, ...) the wait is drawn from ``[0, min(MAX_WAIT_S, backoff_s * 2 ** (n - 1))]``
    seconds; ``sleep`` waits it (tests pass their own).

    >>> waits = []
    >>> policy = RetryPolicy(retries=2, backoff_s=0.5, sleep=waits.append)
    >>> tries = iter([KeyError("busy"), KeyError("busy"), "done"])
    >>> def step():
    ...     outcome = next(tries)
    ...     if isinstance(outcome, Exception):
    ...         raise outcome
    ...     return outcome
    >>> policy.call(step, "the step", retry_on=(KeyError,))
    'done'
    >>> len(waits), 0 <= waits[0] <= 0.5, 0 <= waits[1] <= 1.0
    (2, True, True)
    """

    retries: int
    backoff_s: float
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff_s < 0:
            msg = f"retries and backoff_s must be >= 0, got {self.retries} and {self.backoff_s}"
            raise ValueError(msg)

    def call(
        self,
        action: Callable[[], T],
        what: str,
        *,
        retry_on: tuple[type[BaseException], ...] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        give_up: Callable[[BaseException], BaseException] | None = None,
        then: str = "retrying",
    ) -> T:
        """``action()``, called again after each exception of ``retry_on`` (default: :func:`delta_conflicts`).

        ``on_failure(err)`` sees every such failure, the last one included. When the retries are spent,
        the last one is raised again, or ``give_up(err)`` is raised from it. Any other exception goes
        through at once. Each wait is logged: ``<what> (<first line of the error>); <then> in <s> s``.
        """
        kinds = delta_conflicts() if retry_on is None else retry_on

        def failed(state: tenacity.RetryCallState) -> None:
            if on_failure is not None:
                on_failure(_error(state))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            log.warning("%s (%s); %s in %.2f s", what, first_line(_error(state)), then, wait)

        def spent(state: tenacity.RetryCallState) -> Any:
            err = _error(state)
            if give_up is None:
                raise err
            raise give_up(err) from err

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(kinds),
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=tenacity.wait_random_exponential(multiplier=self.backoff_s, max=MAX_WAIT_S),
            sleep=self.sleep,
            after=failed,
            before_sleep=before_sleep,
            retry_error_callback=spent,
        )
        return retrying(action)


def _error(state: tenacity.RetryCallState) -> BaseException:
    """The exception the attempt of ``state`` raised."""
    assert state.outcome is not None and state.outcome.failed
    err = state.outcome.exception()
    assert err is not None
    return err
