"""Assembling a broker process: the command, the run loop and its signals, serving one broker
(services, background loops, shutdown), one replica's life (follow, lead), and the
MessagingService servicer that binds the producer and consumer handlers.

May import: every other room of the broker; nothing imports it (but ``txmq.broker.__main__``).
"""
