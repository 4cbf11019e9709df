"""The watch channel's contract: targets, frames, and trigger globs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from protocol.watch import (
    WATCH_DOWN_ADAPTER,
    WATCH_UP_ADAPTER,
    ResourceChanged,
    Watch,
    WatchTarget,
    glob_matches,
    literal_prefix,
)


@pytest.mark.parametrize(
    ("glob", "uri", "expected"),
    [
        ("file:///srv/inbox/*", "file:///srv/inbox/a.txt", True),
        ("file:///srv/inbox/*", "file:///srv/inbox/sub/a.txt", True),  # `*` crosses `/`
        ("file:///srv/inbox/*", "file:///srv/other/a.txt", False),
        ("file:///srv/inbox/[1]*", "file:///srv/inbox/[1]a", True),  # `[` is literal
        ("file:///srv/inbox/[1]*", "file:///srv/inbox/1a", False),
        ("status://incident-?", "status://incident-7", True),
        ("status://incident-?", "status://incident-77", False),
        ("a.b", "axb", False),  # `.` is literal
    ],
)
def test_glob_matches_only_star_and_question_mark(glob: str, uri: str, expected: bool) -> None:
    assert glob_matches(glob, uri) is expected


def test_literal_prefix_stops_at_the_first_wildcard() -> None:
    assert literal_prefix("file:///srv/*/x?") == "file:///srv/"
    assert literal_prefix("a?b*") == "a"
    assert literal_prefix("no-wildcard") == "no-wildcard"


def test_a_target_names_exactly_one_of_uri_and_glob() -> None:
    with pytest.raises(ValidationError):
        WatchTarget(trigger="t")
    with pytest.raises(ValidationError):
        WatchTarget(trigger="t", uri="a://b", glob="a://*")
    assert WatchTarget(trigger="t", glob="a://*").glob == "a://*"


def test_frames_round_trip_and_unknown_methods_are_refused() -> None:
    up = WATCH_UP_ADAPTER.validate_json(
        '{"jsonrpc":"2.0","method":"ev/resource","params":{"uri":"x://y","etag":"7","synthetic":true}}'
    )
    assert isinstance(up, ResourceChanged) and up.params.synthetic is True
    with pytest.raises(ValidationError):
        WATCH_UP_ADAPTER.validate_json('{"jsonrpc":"2.0","method":"ev/result","params":{}}')
    down = WATCH_DOWN_ADAPTER.validate_python(
        {
            "jsonrpc": "2.0",
            "method": "ctrl/watch",
            "params": {
                "watcher_id": "w-files",
                "server": {"name": "files", "transport": "stdio", "command": ["x"]},
                "targets": [{"trigger": "inbox", "glob": "file:///srv/*"}],
            },
        }
    )
    assert isinstance(down, Watch) and down.params.targets[0].trigger == "inbox"
