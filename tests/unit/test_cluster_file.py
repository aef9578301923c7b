"""The cluster file: what it accepts, what it refuses (one error naming file and key), and that
writing then reading gives the same cluster. Real files under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.coordination.cluster_file import ClusterFile, ClusterFileError, Group, Member, load, write

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
    _refused(tmp_path, text, message)


def _refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value).strip()


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="cannot read cluster file"):
        load(tmp_path / "absent.toml")


GROUPED = """
[cluster]
name = "local"
etcd = "127.0.0.1:2379"

[[group]]
name = "group-0"
[[group.replica]]
name = "replica-0"
endpoint = "127.0.0.1:8081"
[[group.replica]]
name = "replica-1"
endpoint = "127.0.0.1:8082"

[[group]]
name = "group-1"
replica = [
  { name = "replica-2", endpoint = "127.0.0.1:8083" },
  { name = "replica-3", endpoint = "127.0.0.1:8084" },
]
"""


def test_groups_load_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(GROUPED)
    c = load(path)
    assert c.etcd == "127.0.0.1:2379" and c.replicated and not c.flat
    assert [(g.name, [m.name for m in g.replicas]) for g in c.groups] == [
        ("group-0", ["replica-0", "replica-1"]),
        ("group-1", ["replica-2", "replica-3"]),
    ]
    assert [m.name for m in c.members] == ["replica-0", "replica-1", "replica-2", "replica-3"]
    assert c.group_of(c.member("replica-3")).name == "group-1"
    write(tmp_path / "again.toml", c)
    assert "[[group.replica]]" in (tmp_path / "again.toml").read_text()
    assert load(tmp_path / "again.toml") == c


def test_the_flat_form_is_groups_of_one() -> None:
    c = ClusterFile("x", (Member("a", "h", 1), Member("b", "h", 2)))
    assert c.flat and not c.replicated
    assert [(g.name, g.replicas) for g in c.groups] == [
        ("a", (Member("a", "h", 1),)),
        ("b", (Member("b", "h", 2),)),
    ]
    same = ClusterFile.of_groups("x", (Group("a", (Member("a", "h", 1),)),
                                       Group("b", (Member("b", "h", 2),))))  # fmt: skip
    assert same == c


_G = '[cluster]\nname = "x"\n'


def _group(name: str, *replicas: tuple[str, str]) -> str:
    rows = "".join(f'[[group.replica]]\nname = "{n}"\nendpoint = "{e}"\n' for n, e in replicas)
    return f'[[group]]\nname = "{name}"\n{rows}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_G + '[[group]]\nname = "g"\n', r"at least one \[\[group.replica\]\]"),
        (_G + _group("g", ("a", "h:1")) + '[[broker]]\nname = "b"\nendpoint = "h:2"\n', "not both"),
        (_G + _group("g", ("a", "h:1")) + _group("g", ("b", "h:2")), "group names must be unique"),
        (_G + _group("g", ("a", "h:1")) + _group("h", ("a", "h:2")), "names must be unique"),
        (_G + _group("g", ("a", "h:1")) + _group("a", ("b", "h:2")), "name of a replica"),
        (_G + _group("g", ("a", "h:1"), ("b", "h:1")), "endpoints must be unique"),
        (_G + _group("g", *[(f"r{i}", f"h:{i + 1}") for i in range(6)]), "1..5 replicas"),
        (_G + _group("g b", ("a", "h:1")), r"\[\[group\]\] #1.name"),
        (_G + _group("g", ("a", "h")), r"\[\[group.replica\]\] #1.endpoint"),
        (_G + '[[group]]\nname = "g"\nleader = "a"\n', "unknown key leader"),
        ('[cluster]\nname = "x"\netcd = "nowhere"\n' + _group("g", ("a", "h:1")), "etcd"),
        ('[cluster]\nname = "x"\nzone = 1\n' + _group("g", ("a", "h:1")), r"\[cluster\] table"),
    ],
)
def test_group_refusals_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    _refused(tmp_path, text, message)
