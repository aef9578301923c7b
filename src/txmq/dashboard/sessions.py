"""Who is signed in to the dashboard, the one-use form tokens each visitor holds, and how often
an address may try to sign in.

Owns: ``Sessions``, two bounded tables keyed by a random cookie value.
- A *signed-in* session holds the admin credentials a person typed, after the broker accepted
  them (actions.py). The table never pushes a live session out: a new one is refused when the
  table is full (after dropping expired ones) or when the person's address already holds
  ``limits.DASHBOARD_SESSIONS_PER_ADDRESS_MAX``. A session ends when signed out, idle for
  ``SESSION_IDLE_S``, or
  ``SESSION_LIFETIME_S`` after it began.
- An *anonymous* session holds only the tokens of the forms shown to a visitor who has not
  signed in (the sign-in form; confirmations on a broker without ACL). When that table is full
  its oldest entry is dropped: the cost is one "try again" for that visitor, never a sign-out.
A token is random (``secrets``), bound to one session, one action and one target, valid for
``ttl_s`` and usable once (redeeming removes it). A session keeps at most
``limits.DASHBOARD_TOKENS_PER_SESSION_MAX`` (its oldest dropped first). The sign-out form carries
the session's
own ``form_key`` instead, so a page left open for an hour can still sign out.
``AttemptLimit``: sign-in attempts per client address in a sliding window, in a bounded table
that refuses new addresses when full of recent ones (an attacker with many source addresses is
slowed down, not let through).
Pure: no I/O; the clock is an argument (``time.monotonic`` by default) so tests move it.
Must not: let one session's token act in another, or keep credentials past their session.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq import limits
from txmq.dashboard.link import Credentials
from txmq.errors import TxmqError, invariant

SESSION_IDLE_S = 3600.0
SESSION_LIFETIME_S = 12 * 3600.0
FORM_TTL_S = 300.0
SIGN_IN_WINDOW_S = 60.0

Clock = Callable[[], float]


class SessionsFullError(TxmqError):
    """No room for another signed-in session (the whole table, or this address's share)."""


@dataclass(frozen=True, slots=True)
class Pending:
    action: str
    target: str
    expires: float


@dataclass
class Session:
    sid: str
    address: str
    credentials: Credentials | None
    started: float
    seen: float
    form_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    tokens: OrderedDict[str, Pending] = field(default_factory=OrderedDict)


class Sessions:
    def __init__(
        self,
        *,
        ttl_s: float = FORM_TTL_S,
        signed_max: int = limits.DASHBOARD_SESSIONS_MAX,
        per_address_max: int = limits.DASHBOARD_SESSIONS_PER_ADDRESS_MAX,
        anonymous_max: int = limits.DASHBOARD_ANONYMOUS_SESSIONS_MAX,
        clock: Clock = time.monotonic,
    ) -> None:
        invariant(ttl_s > 0, "a form stays valid for a positive time")
        invariant(0 < per_address_max <= signed_max, "an address's share fits the table")
        self.ttl_s = ttl_s
        self.signed_max, self.per_address_max = signed_max, per_address_max
        self.anonymous_max = anonymous_max
        self.clock = clock
        self.signed: dict[str, Session] = {}
        self.anonymous: OrderedDict[str, Session] = OrderedDict()

    # --- Sessions. -------------------------------------------------------------------------------

    def get(self, sid: str) -> Session | None:
        """The live session ``sid`` names (its idle time restarts), or None."""
        now = self.clock()
        found = self.signed.get(sid)
        if found is not None and self._expired(found, now):
            del self.signed[sid]
            found = None
        if found is None:
            found = self.anonymous.get(sid)
            if found is not None and now - found.seen > self.ttl_s:
                del self.anonymous[sid]
                found = None
        if found is not None:
            found.seen = now
        return found

    def start_anonymous(self, address: str) -> Session:
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), address, None, now, now)
        self.anonymous[session.sid] = session
        while len(self.anonymous) > self.anonymous_max:  # bounded: one over at most
            self.anonymous.popitem(last=False)
        return session

    def sign_in(self, address: str, credentials: Credentials, replaces: str = "") -> Session:
        """A new signed-in session (a new cookie value: the session it ``replaces`` ends, so a
        cookie planted before sign-in is worth nothing after it).

        Raises:
            SessionsFullError: the table, or this address's share of it, is full of live
                sessions.
        """
        now = self.clock()
        for sid in [s.sid for s in self.signed.values() if self._expired(s, now)]:
            del self.signed[sid]
        mine = sum(1 for s in self.signed.values() if s.address == address)
        if mine >= self.per_address_max:
            raise SessionsFullError(
                f"{address} already holds {mine} signed-in sessions: sign out of one first"
            )
        if len(self.signed) >= self.signed_max:
            raise SessionsFullError(
                f"the dashboard holds its maximum of {self.signed_max} signed-in sessions"
            )
        self.end(replaces)
        session = Session(secrets.token_urlsafe(32), address, credentials, now, now)
        self.signed[session.sid] = session
        return session

    def end(self, sid: str) -> None:
        self.signed.pop(sid, None)
        self.anonymous.pop(sid, None)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.seen > SESSION_IDLE_S or now - session.started > SESSION_LIFETIME_S

    # --- Form tokens. ----------------------------------------------------------------------------

    def issue(self, session: Session, action: str, target: str) -> str:
        token = secrets.token_urlsafe(32)
        session.tokens[token] = Pending(action, target, self.clock() + self.ttl_s)
        while (
            len(session.tokens) > limits.DASHBOARD_TOKENS_PER_SESSION_MAX
        ):  # bounded: one over at most
            session.tokens.popitem(last=False)
        return token

    def redeem(self, session: Session | None, token: str, action: str, target: str) -> bool:
        """True when ``token`` was issued to ``session`` for this action and target and has
        not expired; it is spent either way."""
        if session is None or not token:
            return False
        pending = session.tokens.pop(token, None)
        return (
            pending is not None
            and pending.action == action
            and pending.target == target
            and self.clock() < pending.expires
        )

    @staticmethod
    def form_key_ok(session: Session | None, key: str) -> bool:
        return session is not None and hmac.compare_digest(session.form_key.encode(), key.encode())


class AttemptLimit:
    """At most ``attempts_max`` attempts per address in any ``window_s``."""

    def __init__(
        self,
        *,
        attempts_max: int = limits.DASHBOARD_SIGN_IN_ATTEMPTS_MAX,
        window_s: float = SIGN_IN_WINDOW_S,
        addresses_max: int = limits.DASHBOARD_SIGN_IN_ADDRESSES_MAX,
        clock: Clock = time.monotonic,
    ) -> None:
        invariant(attempts_max > 0 and window_s > 0, "a limit allows something")
        self.attempts_max, self.window_s = attempts_max, window_s
        self.addresses_max = addresses_max
        self.clock = clock
        self._seen: dict[str, deque[float]] = {}

    def allow(self, address: str) -> bool:
        """Count one attempt from ``address``; False (not counted) when over the limit or when
        the table is full of addresses seen within the window."""
        now = self.clock()
        recent = self._seen.get(address)
        if recent is None:
            if len(self._seen) >= self.addresses_max:
                self._forget_quiet(now)
            if len(self._seen) >= self.addresses_max:
                return False
            recent = self._seen[address] = deque(maxlen=self.attempts_max)
        while recent and now - recent[0] >= self.window_s:  # bounded: attempts_max entries
            recent.popleft()
        if len(recent) >= self.attempts_max:
            return False
        recent.append(now)
        return True

    def retry_after_s(self, address: str) -> int:
        recent = self._seen.get(address)
        if not recent:
            return int(self.window_s)
        return max(1, int(recent[0] + self.window_s - self.clock()) + 1)

    def _forget_quiet(self, now: float) -> None:
        quiet = [a for a, r in self._seen.items() if not r or now - r[-1] >= self.window_s]
        for address in quiet:
            del self._seen[address]
