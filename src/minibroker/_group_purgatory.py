"""The group coordinator's purgatory: parked JoinGroup and SyncGroup requests, and its timers.

Kafka parks these long polls as delayed operations (``DelayedJoin``, ``DelayedSync``) and
expires members with ``DelayedHeartbeat``. Here a parked request is a :class:`Ticket`, its
answer a :class:`Completion` waiting in the outbox, and every deadline a timer on one heap. This
module only keeps them: whether a timer still means something, and what firing it does, is the
rebalance's decision (``_group_rebalance``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Literal, TypeVar

from minibroker._group_state import Member
from minibroker._group_values import (
    Completion,
    GroupError,
    JoinGroupResult,
    SyncGroupResult,
    Ticket,
    join_error,
)

TimerKind = Literal["session", "pending", "join", "sync"]
# (deadline_s, sequence number, kind, group id, member id or "")
Timer = tuple[float, int, TimerKind, str, str]
_R = TypeVar("_R", JoinGroupResult, SyncGroupResult)


class Purgatory:
    """Tickets, completions and timers, with the coordinator's notion of now."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        # The clock's time, or while a timer fires, that timer's deadline.
        self.now_s = clock()
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._ticket_ids = itertools.count(1)
        self._open: dict[int, Ticket] = {}
        self._outbox: list[Completion] = []

    @property
    def open_tickets(self) -> int:
        return len(self._open)

    def clear(self) -> None:
        """Drop every timer and open ticket; completions already made stay in the outbox."""
        self._timers.clear()
        self._open.clear()

    # ---------------------------------------------------------------- tickets

    def issue(self, kind: Literal["join", "sync"], group_id: str, member_id: str) -> Ticket:
        ticket = Ticket(
            ticket_id=next(self._ticket_ids), kind=kind, group_id=group_id, member_id=member_id
        )
        self._open[ticket.ticket_id] = ticket
        return ticket

    def forget(self, ticket: Ticket) -> bool:
        """Close ``ticket`` unanswered; False if it was not open."""
        return self._open.pop(ticket.ticket_id, None) is not None

    def finish_join(self, member: Member, result: JoinGroupResult) -> None:
        ticket, member.join_ticket = member.join_ticket, None
        if ticket is not None and self._open.pop(ticket.ticket_id, None) is not None:
            self._outbox.append(Completion(ticket=ticket, result=result))

    def finish_sync(self, member: Member, result: SyncGroupResult) -> None:
        ticket, member.sync_ticket = member.sync_ticket, None
        if ticket is not None and self._open.pop(ticket.ticket_id, None) is not None:
            self._outbox.append(Completion(ticket=ticket, result=result))

    def refuse(self, member: Member, error: GroupError) -> None:
        """Answer ``member``'s parked JoinGroup and SyncGroup, if any, with ``error``."""
        self.finish_join(member, join_error(error, member.member_id))
        self.finish_sync(member, SyncGroupResult(error_code=error))

    def claim(self, outcome: _R | Ticket, kind: type[_R]) -> _R | Ticket:
        """Answer the caller directly when its own request completed within the call."""
        if isinstance(outcome, Ticket):
            for i, done in enumerate(self._outbox):
                if done.ticket == outcome and isinstance(done.result, kind):
                    del self._outbox[i]
                    return done.result
        return outcome

    def completions(self) -> list[Completion]:
        """Hand out every completion not yet handed out."""
        out, self._outbox = self._outbox, []
        return out

    # ---------------------------------------------------------------- timers

    def schedule(self, deadline_s: float, kind: TimerKind, group_id: str, member_id: str) -> None:
        heapq.heappush(self._timers, (deadline_s, next(self._seq), kind, group_id, member_id))

    def pop_due(self, now_s: float) -> Timer | None:
        """The earliest timer due at ``now_s``, taken off the heap; None if none is due."""
        if self._timers and self._timers[0][0] <= now_s:
            return heapq.heappop(self._timers)
        return None

    def next_deadline(self, live: Callable[[Timer], bool]) -> float | None:
        """When there is next work: now while completions wait, else the earliest timer that
        ``live`` keeps (the dead ones before it are dropped); None if there is none."""
        if self._outbox:
            return self.now_s
        while self._timers and not live(self._timers[0]):
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None
