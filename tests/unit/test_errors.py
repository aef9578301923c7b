"""errors.from_code: the one mapping from a wire status code to the error tree.

Goal: every code a class of ``txmq.errors`` declares comes back as exactly that class, codes no
class declares fall to their family or to BrokerRefusedError, and the broker's message and code
survive; so every client (CLI, Spark) types a refusal the same way.
"""

from __future__ import annotations

import pytest

from txmq import errors


def _declaring_classes() -> list[type[errors.TxmqError]]:
    out, todo = [], [errors.TxmqError]
    while todo:
        cls = todo.pop(0)
        if "code" in vars(cls) and cls.__module__ == errors.__name__:
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_each_declared_code_maps_to_its_most_general_declaring_class() -> None:
    seen: dict[int, type[errors.TxmqError]] = {}
    for cls in _declaring_classes():
        seen.setdefault(cls.code, cls)
    assert len(seen) >= 20
    for code, cls in seen.items():
        if cls is errors.TxmqError:
            continue
        exc = errors.from_code(code, "the broker's words")
        assert type(exc) is cls, code
        assert str(exc) == "the broker's words" and exc.code == code


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (errors.CODE_TOPIC_NOT_FOUND, errors.TopicNotFoundError),
        (errors.CODE_ILLEGAL_OFFSET, errors.IllegalOffsetError),
        (errors.CODE_ILLEGAL_TOPIC, errors.IllegalTopicError),
        (errors.CODE_PRECONDITION_FAILED, errors.TransactionConflictError),
        (errors.CODE_BAD_REQUEST, errors.BadRequestError),
        (errors.CODE_ILLEGAL_ACCESS_POINT, errors.BadRequestError),  # family 40000
        (40499, errors.NotFoundError),  # family 40400
        (errors.CODE_PROXY_TIMEOUT, errors.BrokerRefusedError),
        (errors.CODE_INTERNAL_ERROR, errors.BrokerRefusedError),
        (12345, errors.BrokerRefusedError),
    ],
)
def test_named_family_and_unknown_codes(code: int, cls: type[errors.TxmqError]) -> None:
    exc = errors.from_code(code, "m")
    assert type(exc) is cls
    assert exc.code == code and str(exc) == "m"


def test_retriable_follows_the_class() -> None:
    assert errors.from_code(errors.CODE_TOO_MANY_REQUESTS, "slow down").retriable
    assert not errors.from_code(errors.CODE_ILLEGAL_TOPIC, "no").retriable


def test_ok_is_not_an_error() -> None:
    with pytest.raises(AssertionError):
        errors.from_code(errors.CODE_OK, "OK")
