"""Which followers of a SYNC replica group wrote an operator's change of consumer positions.

Owns: ``PositionsVersion``, a leader's count of the operator verbs that changed its consumer
positions (``group reset``, ``group delete``: admin/service.py passes them through
``Replication.confirm_positions``) and, per follower, the version of the positions copy that
follower last said it wrote; and the refusal's message (``not_confirmed``). Sans-I/O: no clock,
no I/O, no event loop (leader.py drives it).
Must not: decide what the positions are (the leader's book does) or write the follower's copy
(positions_copy.py).

Why: a follower copies the leader's whole positions snapshot with a fetch about once a second.
An ordinary consumer ack may lag that way (at-least-once), but an operator verb answered OK must
outlive its leader as an acknowledged message does under SYNC replication. So once the verb's
change is in the leader's book, the verb bumps the version to ``v``; every fetch of a follower
that has not reported ``v`` carries the snapshot and the version (the version read first, the
snapshot taken after, with no await between: a snapshot labelled ``v`` holds every change made
before ``v`` was bumped); a parked fetch returns at once for it; the follower writes the copy
durably (write, fsync, rename) and names the version it wrote in its next fetch; the verb
answers OK once every follower of the stored in-sync set named ``v`` or a later one.

Why the counts may live in memory: a version is ``[token, n]``, ``token`` drawn at random for
each leadership (one ``Replication``), ``n`` counted from 0 within it. A follower reports the
pair the leader shipped, and a leader counts a report only under its own token. So
- a leader that restarted, or another replica that took the lead, starts at 0 under a new
  token: a follower's report of an earlier leadership, however high its ``n``, confirms
  nothing (nor could a stale follower look confirmed by a low ``n`` that happens to match);
- a follower that restarted reports nothing until it wrote a shipment again (its report is in
  memory too; follower.py drops the positions file when it starts), so its very next fetch
  carries the positions;
- within a leadership ``n`` only grows, and a follower's fetches to its leader come one at a
  time, so its latest report is what its file holds.
A verb answered OK under an earlier leadership was confirmed then by the set stored then; one
that was not confirmed was answered with the timeout status instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from txmq import limits
from txmq.errors import invariant


class PositionsVersion:
    """A leader's positions version and what each follower reported writing."""

    def __init__(self, token: str) -> None:
        invariant(bool(token), "a leadership's token is not empty")
        self.token = token
        self.current = 0
        self._written: dict[str, int] = {}  # follower -> n it wrote under this token

    def bump(self) -> int:
        """An operator verb changed the positions: the version its followers must write."""
        self.current += 1
        return self.current

    def stamp(self) -> list[Any]:
        """The version as a fetch reply carries it beside the positions."""
        return [self.token, self.current]

    def report(self, name: str, written: Any) -> bool:
        """Follower ``name``'s fetch said which version its copy holds (``[token, n]`` as
        shipped, or None); another leadership's token counts as none. True if that confirms
        more than its last report did."""
        n = 0
        if isinstance(written, list) and len(written) == 2 and written[0] == self.token:
            said = written[1]
            # Only a version this leader made counts (a damaged request confirms nothing).
            ok = isinstance(said, int) and not isinstance(said, bool) and 0 <= said <= self.current
            n = said if ok else 0
        before = self._written.get(name, 0)
        if name not in self._written:
            invariant(len(self._written) < limits.REPLICAS_MAX, "too many followers")
        self._written[name] = n
        return n > before

    def behind(self, name: str) -> bool:
        """Whether follower ``name``'s copy misses an operator's change: its fetches carry the
        positions until it reports the current version."""
        return self._written.get(name, 0) < self.current

    def missing(self, names: Iterable[str], version: int) -> list[str]:
        """Of ``names``, the followers that have not reported writing ``version``."""
        return sorted(n for n in names if self._written.get(n, 0) < version)


def not_confirmed(me: str, missing: list[str], waited_s: float, bound: str) -> str:
    """Why an operator's change of positions is refused: which replicas did not write it."""
    return (
        f"the change of consumer positions is applied and durable on the leader {me}, but"
        f" {', '.join(missing)} did not confirm writing it within {waited_s * 1000:.0f} ms"
        f" ({bound}): a failover to a replica that lacks it before it fetches the positions"
        " (about once a second) would undo it"
    )
