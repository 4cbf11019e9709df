"""A child's stdio pipes (`processes.pipes`): creation, closing each end once, the read loop."""

from __future__ import annotations

import fcntl
import os

import anyio
import pytest

from processes.pipes import open_stdio_pipes, read_chunk
from tests.support.leaks import open_fd_count


def _is_cloexec(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)


def test_the_pipes_connect_each_child_end_to_ours_and_are_all_close_on_exec() -> None:
    pipes = open_stdio_pipes()
    try:
        assert all(_is_cloexec(fd) for fd in (*pipes.child_ends, pipes.stdin, pipes.stdout, pipes.stderr))
        os.write(pipes.stdin, b"in")
        os.write(pipes.child_stdout, b"out")
        os.write(pipes.child_stderr, b"err")
        assert os.read(pipes.child_stdin, 8) == b"in"
        assert os.read(pipes.stdout, 8) == b"out"
        assert os.read(pipes.stderr, 8) == b"err"
    finally:
        pipes.close()


def test_closing_twice_never_closes_a_reused_fd_number() -> None:
    pipes = open_stdio_pipes()
    pipes.close()
    reused_r, reused_w = os.pipe()  # takes the lowest numbers, just freed
    try:
        pipes.close_child_ends()
        pipes.close()
        os.write(reused_w, b"still open")
        assert os.read(reused_r, 16) == b"still open"
    finally:
        os.close(reused_r)
        os.close(reused_w)


def test_a_failure_midway_leaves_no_pipe_open(monkeypatch: pytest.MonkeyPatch) -> None:
    real_pipe2 = os.pipe2
    calls = 0

    def pipe2_failing_third(flags: int) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(24, "Too many open files")
        return real_pipe2(flags)

    before = open_fd_count()
    monkeypatch.setattr(os, "pipe2", pipe2_failing_third)
    with pytest.raises(OSError, match="Too many open files"):
        open_stdio_pipes()
    assert open_fd_count() == before


@pytest.mark.anyio
async def test_read_chunk_returns_what_was_written_then_empty_at_eof() -> None:
    read_end, write_end = os.pipe2(os.O_NONBLOCK)
    try:
        with anyio.fail_after(5):
            os.write(write_end, b"hello")
            assert await read_chunk(read_end) == b"hello"
            os.close(write_end)
            assert await read_chunk(read_end) == b""
    finally:
        os.close(read_end)


@pytest.mark.anyio
async def test_read_chunk_waits_for_data_and_honours_its_size_bound() -> None:
    read_end, write_end = os.pipe2(os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def reader() -> None:
                    chunks.append(await read_chunk(read_end, 4))

                tg.start_soon(reader)
                await anyio.wait_all_tasks_blocked()
                os.write(write_end, b"abcdef")
            chunks.append(await read_chunk(read_end, 4))
        assert chunks == [b"abcd", b"ef"]
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.anyio
async def test_read_chunk_ends_with_empty_once_another_task_announces_the_close() -> None:
    read_end, write_end = os.pipe2(os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def reader() -> None:
                    chunks.append(await read_chunk(read_end))

                tg.start_soon(reader)
                await anyio.wait_all_tasks_blocked()
                anyio.notify_closing(read_end)
        assert chunks == [b""]
    finally:
        os.close(read_end)
        os.close(write_end)
