"""How a read numbers the queues it reads, and Spark's offsets of them. Pure.

A read covers every queue of a topic on every member of a cluster (a broker alone, or a replica
group, is one member). Queue ``q`` of member ``m`` (in cluster-file order) is the read's queue
``m * STRIDE + q``, with STRIDE the most queues a topic can have: a broker alone numbers its
queues 0..n-1, and every number keeps its meaning when the topic grows (``txmq topic update``):
new queues get new numbers, the others keep theirs and their offsets.

Offsets are JSON objects ``{"<number>": <next queue offset to read>}``, as Spark keeps them in
its checkpoint. On a cluster they also carry ``"stride": STRIDE``: offsets checkpointed under the
numbering this one replaced (member after member without gaps, queue ``q`` of member ``m`` was
``m * n + q`` for ``n`` queues per member, a count that could not change then) have no such key,
and are read as what they meant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from txmq import limits
from txmq.spark.options import Offsets, TxmqOptionError, parse_checkpointed

STRIDE: Final = limits.QUEUES_PER_TOPIC_MAX
STRIDE_KEY: Final = "stride"


def number(member: int, queue: int) -> int:
    """The read's number of queue ``queue`` of member ``member``."""
    return member * STRIDE + queue


def locate(n: int) -> tuple[int, int]:
    """(member index, queue id) of the read's queue number ``n``."""
    return divmod(n, STRIDE)


def numbers(counts: Sequence[int]) -> list[int]:
    """Every queue's number, member after member, for ``counts`` queues on each member."""
    return [number(m, q) for m, count in enumerate(counts) for q in range(count)]


def encode(values: Mapping[int, int], members: int) -> Offsets:
    """Offsets as Spark keeps them (with the stride on a cluster)."""
    out: Offsets = {str(n): v for n, v in sorted(values.items())}
    if members > 1:
        out[STRIDE_KEY] = STRIDE
    return out


def decode(offsets: Mapping[str, object], members: int) -> dict[int, int]:
    """Offsets Spark hands back (from its checkpoint or from this source): number -> offset,
    offsets of the older cluster numbering renumbered.

    Raises:
        TxmqOptionError: malformed, or older cluster offsets that do not divide between the
            cluster's ``members`` members (its cluster file changed under the query).
    """
    stride = offsets.get(STRIDE_KEY)
    values = parse_checkpointed({k: v for k, v in offsets.items() if k != STRIDE_KEY})
    if members == 1 or stride == STRIDE:
        return values
    if stride is not None:
        raise TxmqOptionError(f"txmq offsets in the checkpoint have stride {stride!r}")
    count = len(values)
    if count == 0 or count % members or sorted(values) != list(range(count)):
        raise TxmqOptionError(
            f"txmq offsets {dict(offsets)!r} in the checkpoint do not number the queues of "
            f"{members} cluster members: was the cluster file changed?"
        )
    per_member = count // members
    return {number(i // per_member, i % per_member): v for i, v in values.items()}
