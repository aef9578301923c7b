"""Pieces every gRPC handler shares: registering the MessagingService with undecodable requests
answered as BAD_REQUEST, a call's metadata, client sessions, errors as reply statuses, our
JSON channels' arguments and refusals, and waiting on the event loop.

May import: nothing else of the broker.
"""
