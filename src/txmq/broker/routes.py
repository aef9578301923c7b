"""Routes: a topic's queues on every live member, shaped as QueryRoute and QueryAssignment answer.

Owns: the ``MessageQueue`` protobufs the official clients route by. Each queue carries its
broker's name, id 0 (the clients send only to "master" brokers, id 0) and endpoint; the clients
key a queue by (broker name, topic, queue id), send and decide a transaction at the endpoint of
the queue a half message went to, and receive and ack at the endpoint of the queue a message
came from. Queue ids are per broker (0..n-1 on each).
Must not: decide who is a member or alive (membership.py) or create topics.

Order: queue 0 of every member, then queue 1 of every member, and so on. The official producer
picks queues round-robin and retries a failed send on the next queue, so with this order a
retry after a dead broker lands on another broker.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq.broker.cluster_file import Member
from txmq.broker.topics import TopicInfo
from txmq.protocol import mapping


def broker_pb(member: Member) -> Any:
    b = pb.Broker(name=member.name, id=0)
    try:
        ip = ipaddress.ip_address(member.host)
        b.endpoints.scheme = pb.IPv4 if ip.version == 4 else pb.IPv6
    except ValueError:
        b.endpoints.scheme = pb.DOMAIN_NAME
    b.endpoints.addresses.add(host=member.host, port=member.port)
    return b


def message_queues(info: TopicInfo, members: Sequence[Member]) -> list[Any]:
    """The topic's queues on ``members``, accepting the types the topic takes (every type for
    an auto-created topic): the client refuses to send a type its route does not list."""
    types = (
        list(mapping.WIRE_TYPES.values())
        if info.accepts_all
        else [mapping.WIRE_TYPES[info.message_type]]
    )
    brokers = [broker_pb(m) for m in members]
    return [
        pb.MessageQueue(
            topic=pb.Resource(name=info.name),
            id=i,
            permission=pb.READ_WRITE,
            broker=broker,
            accept_message_types=types,
        )
        for i in range(info.queue_count)
        for broker in brokers
    ]
