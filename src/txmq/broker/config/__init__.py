"""The broker's configuration: the one frozen ``BrokerConfig``, the sources it is loaded from
(defaults < TOML file < ``TXMQ_*`` environment < flags) and the click options they share.

May import: nothing else of the broker.
"""
