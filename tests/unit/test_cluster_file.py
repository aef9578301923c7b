"""The cluster file: what it accepts, what it refuses (one error naming file and key), and that
writing then reading gives the same cluster. Real files under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.cluster_file import ClusterFile, ClusterFileError, Member, load, write

GOOD = """
[cluster]
name = "local"

[[broker]]
name = "broker-0"
endpoint = "127.0.0.1:8081"

[[broker]]
name = "broker-1"
endpoint = "127.0.0.1:8082"
"""


def test_load_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(GOOD)
    c = load(path)
    assert c.name == "local"
    assert [m.endpoint for m in c.members] == ["127.0.0.1:8081", "127.0.0.1:8082"]
    write(tmp_path / "again.toml", c)
    assert load(tmp_path / "again.toml") == c


def test_find_self_by_name_or_endpoint() -> None:
    c = ClusterFile("x", (Member("a", "h", 1), Member("b", "h", 2)))
    assert c.find_self(name="b", host="ignored", port=0).name == "b"
    assert c.find_self(name="", host="h", port=1).name == "a"
    with pytest.raises(ClusterFileError, match="no member has endpoint h:3"):
        c.find_self(name="", host="h", port=3)
    with pytest.raises(ClusterFileError, match="no broker named 'c'"):
        c.find_self(name="c", host="h", port=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml [", "not valid TOML"),
        ('[cluster]\nname = "x"\n', "at least one"),
        ('[[broker]]\nname = "a"\nendpoint = "h:1"\n', r"\[cluster\] table"),
        ('[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "h"\n', "HOST:PORT"),
        ('[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "h:0"\n', "1..65535"),
        ('[cluster]\nname = "x"\n[[broker]]\nname = "a b"\nendpoint = "h:1"\n', ".name"),
        ('[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "h:1"\nport = 3\n', "port"),
        (
            '[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "h:1"\n'
            '[[broker]]\nname = "a"\nendpoint = "h:2"\n',
            "names must be unique",
        ),
        (
            '[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "h:1"\n'
            '[[broker]]\nname = "b"\nendpoint = "h:1"\n',
            "endpoints must be unique",
        ),
        ('[cluster]\nname = "x"\n[nodes]\n', "unknown section"),
    ],
)
def test_refusals_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value).strip()


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="cannot read cluster file"):
        load(tmp_path / "absent.toml")
