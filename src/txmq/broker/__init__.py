"""The broker: a grpc.aio node serving the RocketMQ v2 MessagingService, txmq's own admin, data
and replica channels, over the store and the transaction coordinator.

Rooms, top to bottom (pyproject's import-linter contract "broker rooms" enforces the order):
node; security | replication | admin | data_channel; state; consume | produce;
cluster | leadership; config | metrics | rpc | topics. ``python -m txmq.broker`` runs
node/command.py.
"""
