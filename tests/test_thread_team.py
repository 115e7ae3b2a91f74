"""The thread team every parallel kernel runs on: every round runs on every thread, errors reach
the caller after all threads finished, and the threads end when their owner is collected or
closed."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from splice.kernels.team import ThreadTeam


def _alive(name: str) -> int:
    return sum(t.name.startswith(name) for t in threading.enumerate())


def test_each_round_calls_every_thread_once_and_waits_for_all():
    pool = ThreadTeam(4, name="t-rounds")
    for r in range(50):
        seen: dict[int, str] = {}

        def fn(tid: int, seen: dict[int, str] = seen) -> None:
            time.sleep(0.001 * (tid % 2))  # the caller must wait for the slower threads
            seen[tid] = threading.current_thread().name

        pool.run(fn)
        assert sorted(seen) == [0, 1, 2, 3], r
        assert len(set(seen.values())) == 4  # four distinct threads, the caller's among them


def test_a_failing_caller_still_waits_for_the_workers():
    pool = ThreadTeam(3, name="t-fail")
    finished: list[int] = []

    def fn(tid: int) -> None:
        if tid == 0:
            raise ValueError("caller's share failed")
        time.sleep(0.01)
        finished.append(tid)

    with pytest.raises(ValueError):
        pool.run(fn)
    assert sorted(finished) == [1, 2]
    pool.run(lambda tid: None)  # still usable


def test_threads_end_when_the_pool_is_collected():
    pool = ThreadTeam(5, name="t-collect")
    pool.run(lambda tid: None)
    assert _alive("t-collect") == 4
    del pool
    gc.collect()
    deadline = time.monotonic() + 5
    while _alive("t-collect") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _alive("t-collect") == 0


def test_a_forked_child_starts_its_own_threads():
    pool = ThreadTeam(3, name="t-fork")
    pool.run(lambda tid: None)
    pid = os.fork()
    if pid == 0:  # the child: without threads of its own, this round would wait forever
        code = 1
        try:
            ran: list[int] = []
            pool.run(ran.append)
            code = 0 if sorted(ran) == [0, 1, 2] else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's round did not finish")


def test_results_come_back_by_thread_id_with_the_arguments_passed():
    team = ThreadTeam(3, name="t-results")
    assert team.run(lambda tid, a, b: (tid, a + b), 1, 2) == [(0, 3), (1, 3), (2, 3)]
    assert ThreadTeam(1).run(lambda tid: tid * 10) == [0]


def test_the_lowest_failing_thread_id_is_raised_after_every_thread_finished():
    team = ThreadTeam(4, name="t-lowest")
    finished: list[int] = []

    def fn(tid: int) -> None:
        if tid in (2, 3):
            raise KeyError(tid)
        time.sleep(0.01)
        finished.append(tid)

    with pytest.raises(KeyError) as info:
        team.run(fn)
    assert info.value.args == (2,)
    assert sorted(finished) == [0, 1]


def test_a_smaller_team_shares_the_helpers_and_leaves_them_open():
    team = ThreadTeam(4, name="t-using")
    team.run(lambda tid: None)
    small = team.using(2)
    assert small.threads == 2 and team.using(9) is team
    names: dict[int, str] = {}
    small.run(lambda tid: names.__setitem__(tid, threading.current_thread().name))
    assert sorted(names) == [0, 1] and names[1] == "t-using-1"
    small.close()
    assert team.run(lambda tid: tid) == [0, 1, 2, 3]
    assert _alive("t-using") == 3


def test_a_closed_team_ends_its_threads_and_refuses_rounds():
    with ThreadTeam(3, name="t-closed") as team:
        team.run(lambda tid: None)
        assert _alive("t-closed") == 2
    deadline = time.monotonic() + 5
    while _alive("t-closed") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _alive("t-closed") == 0
    with pytest.raises(RuntimeError, match="closed"):
        team.run(lambda tid: None)
