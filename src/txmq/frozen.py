"""``value``: the decorator of txmq's value classes (txmq.model and the layers above).

Owns: frozen by type, not by a runtime guard. mypy refuses any assignment to a field of a
``value`` class, as for ``dataclass(frozen=True)``, while constructing one costs plain slot
stores: ``frozen=True`` sets each field through ``object.__setattr__``, a C call per field
(issue 17). Why a module of its own: it is never compiled (docs/adr/0007), since
``dataclass_transform`` marks the decorator function with an attribute, which a compiled
function cannot take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[_T]) -> type[_T]:
    """``dataclass(frozen=True, slots=True)`` for the type checker; at run time the same class
    (fields, ``__eq__``, ``__hash__`` over the fields, slots) without the frozen ``__setattr__``
    guard, so a construction is plain slot stores."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
