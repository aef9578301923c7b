"""txmq: a transactional message broker speaking the RocketMQ 5 gRPC protocol."""
