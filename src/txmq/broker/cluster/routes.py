"""Routes: a topic's queues on every live broker, shaped as QueryRoute and QueryAssignment answer.

Owns: the ``MessageQueue`` protobufs the official clients route by, built from ``Advertised``
values (a broker's name and its endpoints; which endpoints a group advertises is decided in one
place, ``Membership.advertised``). Each queue carries its broker's name (a replica group's name,
whichever replica leads it), id 0 (the clients send only to "master" brokers, id 0) and
endpoints; the clients key a queue by (broker name, topic, queue id), send and decide a
transaction at the endpoint of the queue a half message went to, and receive and ack at the
endpoint of the queue a message came from. Queue ids are per broker (0..n-1 on each).
Must not: decide who is a member or alive (membership.py) or create topics.

Order: queue 0 of every member, then queue 1 of every member, and so on. The official producer
picks queues round-robin and retries a failed send on the next queue, so with this order a
retry after a dead broker lands on another broker.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq.broker.topics.registry import TopicInfo
from txmq.coordination.cluster_file import Member
from txmq.protocol import mapping


@dataclass(frozen=True, slots=True)
class Advertised:
    """A broker as a route shows it: the name clients key its queues by, and its endpoints."""

    name: str
    endpoints: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, member: Member) -> Advertised:
        return cls(member.name, ((member.host, member.port),))


def broker_pb(broker: Advertised) -> Any:
    b = pb.Broker(name=broker.name, id=0)
    try:
        ip = ipaddress.ip_address(broker.endpoints[0][0])
        b.endpoints.scheme = pb.IPv4 if ip.version == 4 else pb.IPv6
    except ValueError:
        b.endpoints.scheme = pb.DOMAIN_NAME
    for host, port in broker.endpoints:
        b.endpoints.addresses.add(host=host, port=port)
    return b


def message_queues(info: TopicInfo, brokers: Sequence[Advertised]) -> list[Any]:
    """The topic's queues on ``brokers``, accepting the types the topic takes (every type for
    an auto-created topic): the client refuses to send a type its route does not list."""
    types = (
        list(mapping.WIRE_TYPES.values())
        if info.accepts_all
        else [mapping.WIRE_TYPES[info.message_type]]
    )
    protos = [broker_pb(b) for b in brokers]
    return [
        pb.MessageQueue(
            topic=pb.Resource(name=info.name),
            id=i,
            permission=pb.READ_WRITE,
            broker=broker,
            accept_message_types=types,
        )
        for i in range(info.queue_count)
        for broker in protos
    ]
