"""The batch jobs' retry policy (jobs.common.retry): attempts, backoff with full jitter, giving up."""

import logging

import pytest

from jobs.common.retry import MAX_WAIT_S, RetryPolicy, delta_conflicts


class Busy(Exception):
    pass


def failing(times: int, result: str = "done"):
    """An action that raises Busy ``times`` times, then returns ``result``; ``calls`` counts the calls."""
    calls = []

    def action() -> str:
        calls.append(1)
        if len(calls) <= times:
            msg = f"busy {len(calls)}\nat a long trace"
            raise Busy(msg)
        return result

    return action, calls


def test_a_conflict_is_retried_after_a_wait_that_doubles_its_bound_up_to_the_cap(monkeypatch, caplog):
    bounds = []

    def uniform(low, high):
        bounds.append((low, high))
        return high  # the longest wait the policy allows

    monkeypatch.setattr("random.uniform", uniform)
    waits, seen = [], []
    action, calls = failing(6)
    policy = RetryPolicy(retries=6, backoff_s=1.5, sleep=waits.append)
    with caplog.at_level(logging.WARNING, logger="jobs.common.retry"):
        got = policy.call(action, "t MERGE conflicted", retry_on=(Busy,), on_failure=seen.append)
    assert got == "done" and len(calls) == 7
    assert waits == [1.5, 3.0, 6.0, MAX_WAIT_S, MAX_WAIT_S, MAX_WAIT_S]
    assert {low for low, _ in bounds} == {0}  # full jitter: anywhere from no wait at all
    assert [str(err).splitlines()[0] for err in seen] == [f"busy {n}" for n in range(1, 7)]
    assert caplog.messages[0] == "t MERGE conflicted (busy 1); retrying in 1.50 s"


def test_spent_retries_raise_the_last_error_or_what_give_up_makes_of_it():
    action, calls = failing(10)
    policy = RetryPolicy(retries=2, backoff_s=0.0, sleep=lambda s: None)
    seen = []
    with pytest.raises(Busy, match="busy 3"):
        policy.call(action, "x", retry_on=(Busy,), on_failure=seen.append)
    assert len(calls) == 3 and len(seen) == 3  # the last failure is reported too

    action, calls = failing(10)
    with pytest.raises(RuntimeError, match="still busy: busy 3") as info:
        policy.call(action, "x", retry_on=(Busy,), give_up=lambda err: RuntimeError(f"still busy: {err}"))
    assert isinstance(info.value.__cause__, Busy) and len(calls) == 3


def test_other_errors_are_not_retried_and_no_retries_means_one_attempt():
    calls = []

    def broken():
        calls.append(1)
        msg = "not a conflict"
        raise KeyError(msg)

    policy = RetryPolicy(retries=5, backoff_s=0.0, sleep=lambda s: None)
    with pytest.raises(KeyError):
        policy.call(broken, "x", retry_on=(Busy,))
    assert len(calls) == 1
    action, calls = failing(1)
    with pytest.raises(Busy):
        RetryPolicy(retries=0, backoff_s=1.0, sleep=lambda s: None).call(action, "x", retry_on=(Busy,))
    assert len(calls) == 1
    with pytest.raises(ValueError, match="retries"):
        RetryPolicy(retries=-1, backoff_s=1.0)


def test_by_default_the_policy_retries_delta_sparks_write_conflicts():
    from delta.exceptions import ConcurrentAppendException

    assert ConcurrentAppendException in delta_conflicts()
    calls = []

    def append_raced():
        calls.append(1)
        if len(calls) == 1:
            raise ConcurrentAppendException(message="Files were added by a concurrent update")
        return len(calls)

    assert RetryPolicy(retries=1, backoff_s=0.0).call(append_raced, "x") == 2
