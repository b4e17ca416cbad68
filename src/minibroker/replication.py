"""A partition's replication state: leader, ISR, leader epoch, high watermark, acks=all purgatory.

This is the one place where a partition's leader/ISR/HWM change. It is pure: no sockets, no event
loop; every method that depends on time takes ``now`` (seconds from ``time.monotonic()`` in the
running cluster, a fake clock in tests). The cluster shell moves follower fetches in and out and
reacts to the ``PartitionListener`` callbacks.

Rules, after Kafka's ``Partition.scala`` / ``ReplicaManager``:

* Followers fetch from the leader. A fetch at offset ``o`` tells the leader the follower's log
  end; the follower was *caught up* at the fetch time if ``o`` reached the leader's log end, or
  at the previous fetch time if ``o`` reached what the leader's log end was then.
* ISR: the leader drops a follower not caught up within ``replica.lag.time.max.ms``, unless the
  log end it last reported is the leader's (Kafka's ``Replica.isCaughtUp``: so a follower that
  stopped fetching stays while the partition is idle), and adds one whose log end reached the
  high watermark and this epoch's start. The leader never leaves its own ISR; only the
  controller empties it, by fencing the last member.
* Eligible leader replicas (KIP-966, on by default since Kafka 4.1): while the ISR is smaller
  than the effective minimum, the replicas that left it (and the earlier ELR) stay eligible to
  lead, as the high watermark could not advance without them: ELR = (ELR + old ISR) - new ISR,
  cleared once the ISR is back at the minimum (Kafka's ``PartitionChangeBuilder``). A replica
  whose broker crashed (unclean shutdown) leaves the ELR when it registers again.
* High watermark = min log end over the ISR; it does not advance while the ISR is smaller than
  the effective minimum min(min.insync.replicas, RF) (Kafka 3.7+, KIP-966).
* acks=all: refused before append with NOT_ENOUGH_REPLICAS when ISR < effective minimum; else
  the reply waits until the HWM covers the batch; REQUEST_TIMED_OUT at the deadline;
  NOT_LEADER_OR_FOLLOWER if leadership moves. An ISR falling below the minimum meanwhile does not
  answer the write: the HWM stands still there, so it waits for the ISR to grow back or for its
  deadline (Kafka 3.7+; NOT_ENOUGH_REPLICAS_AFTER_APPEND remains only for a write whose offset
  the HWM covered while the ISR was already short, as ``checkEnoughReplicasReachOffset``).
* A follower that starts following a new leader epoch first truncates its log where it diverges
  from the leader's (leader-epoch cache), then copies.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from minibroker._batch import BatchHeader
from minibroker.log import AppendResult, ReplicaLog, StoredBatch

__all__ = [
    "CommitWaiter",
    "FollowerFetch",
    "Partition",
    "PartitionListener",
]

logger = logging.getLogger(__name__)


class PartitionListener(Protocol):
    """What the shell learns from a partition (all called synchronously)."""

    def appended(self, partition: Partition) -> None:
        """The leader's log grew: followers have something to fetch."""

    def high_watermark_advanced(self, partition: Partition) -> None:
        """Consumers may read more."""

    def state_changed(self, partition: Partition) -> None:
        """Leader, ISR or epoch changed: cluster metadata is stale."""


class CommitWaiter:
    """An acks=all write waiting for the HWM to reach ``required_offset``."""

    __slots__ = ("callback", "deadline", "required_offset")

    def __init__(
        self, required_offset: int, deadline: float, callback: Callable[[ErrorCode], None]
    ) -> None:
        self.required_offset = required_offset
        self.deadline = deadline
        self.callback = callback


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """What one follower fetch brought back from the leader (applied later by ``apply_fetch``)."""

    leader_epoch: int
    fetch_offset: int
    batches: Sequence[StoredBatch]
    leader_high_watermark: int


class _Follower:
    __slots__ = ("last_caught_up", "last_fetch_leader_end", "last_fetch_time", "log_end")

    def __init__(self, now: float) -> None:
        # Kafka starts a follower as caught up at election time, giving it the full lag window.
        self.log_end = -1
        self.last_caught_up = now
        self.last_fetch_leader_end = -1
        self.last_fetch_time = now


class Partition:
    """Replication state of one topic partition across its replicas."""

    def __init__(
        self,
        *,
        topic: str,
        index: int,
        replicas: tuple[int, ...],
        min_insync_replicas: int,
        replica_lag_time_max_s: float,
        listener: PartitionListener,
        now: float,
        logs: Mapping[int, ReplicaLog] | None = None,
        isr: tuple[int, ...] | None = None,
    ) -> None:
        """``isr`` (default: every replica) is the replicas whose brokers are active, in
        assignment order; the first of them leads (Kafka's ``createTopic`` and
        ``createPartitions`` leave fenced brokers out of a new partition's ISR)."""
        if not replicas or len(set(replicas)) != len(replicas):
            raise ValueError(f"replicas must be distinct broker ids, got {replicas}")
        isr = replicas if isr is None else isr
        if not isr or not set(isr) <= set(replicas):
            raise ValueError(f"the ISR {isr} must be a non-empty subset of {replicas}")
        self.topic = topic
        self.index = index
        self.replicas = replicas
        self.logs: dict[int, ReplicaLog] = (
            dict(logs) if logs is not None else {r: ReplicaLog() for r in replicas}
        )
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_s = replica_lag_time_max_s
        self.leader = isr[0]
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = isr
        self.elr: tuple[int, ...] = ()
        """Eligible leader replicas (KIP-966), ascending as Kafka lists them."""
        self.last_known_elr: tuple[int, ...] = ()
        """The leader the partition had when its ISR became empty: elected if it returns while
        the ISR and ELR are empty (Kafka's "last known leader" balanced recovery)."""
        self._listener = listener
        self._followers = {r: _Follower(now) for r in replicas if r != self.leader}
        self._epoch_start_offset = 0
        self._needs_truncation: set[int] = set()
        self._waiters: deque[CommitWaiter] = deque()

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader}, isr={list(self.isr)}, "
            f"elr={list(self.elr)}, epoch={self.leader_epoch}, hw={self.high_watermark})"
        )

    # ----------------------------------------------------------------- views

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def effective_min_isr(self) -> int:
        return min(self.min_insync_replicas, len(self.replicas))

    @property
    def high_watermark(self) -> int:
        return self.logs[self.leader].high_watermark if self.leader >= 0 else -1

    @property
    def log_end_offset(self) -> int:
        return self.logs[self.leader].log_end_offset if self.leader >= 0 else -1

    @property
    def epoch_start_offset(self) -> int:
        """The leader's log end when it took this epoch's leadership."""
        return self._epoch_start_offset

    @property
    def leader_log(self) -> ReplicaLog:
        return self.logs[self.leader]

    @property
    def pending_commits(self) -> int:
        return len(self._waiters)

    def followers(self) -> list[int]:
        return [r for r in self.replicas if r != self.leader] if self.leader >= 0 else []

    def elr_after(self, isr: Sequence[int], crashed: int | None = None) -> tuple[int, ...]:
        """The ELR once the ISR becomes ``isr`` (Kafka's ``maybePopulateTargetElr``): empty at
        or above the effective minimum, else the current ELR and ISR minus ``isr`` and minus a
        replica whose broker ``crashed``."""
        if len(isr) >= self.effective_min_isr:
            return ()
        eligible = (set(self.elr) | set(self.isr)) - set(isr)
        eligible.discard(crashed if crashed is not None else -1)
        return tuple(sorted(eligible))

    # ----------------------------------------------------------------- producing

    def append(
        self, buffer: bytearray, header: BatchHeader, *, acks: int, now: float
    ) -> AppendResult:
        """Append a producer's batch on the leader (the caller checked it is the leader)."""
        if self.leader < 0:
            return AppendResult(error=ErrorCode.leader_not_available)
        if acks == -1 and len(self.isr) < self.effective_min_isr:
            return AppendResult(
                error=ErrorCode.not_enough_replicas,
                message=f"the ISR {list(self.isr)} of {self.name} is smaller than "
                f"min.insync.replicas {self.effective_min_isr}",
            )
        result = self.logs[self.leader].append_as_leader(buffer, header, self.leader_epoch)
        if result.error == ErrorCode.none and not result.duplicate:
            self._listener.appended(self)
            self._maybe_advance_high_watermark()
        return result

    def await_commit(
        self, next_offset: int, deadline: float, callback: Callable[[ErrorCode], None]
    ) -> ErrorCode | None:
        """acks=all: the outcome now, or None after registering ``callback`` for later."""
        if self.high_watermark >= next_offset:
            return self._commit_outcome()
        self._waiters.append(CommitWaiter(next_offset, deadline, callback))
        return None

    def _commit_outcome(self) -> ErrorCode:
        # Kafka's checkEnoughReplicasReachOffset
        if len(self.isr) >= self.effective_min_isr:
            return ErrorCode.none
        return ErrorCode.not_enough_replicas_after_append

    def _complete_waiters(self) -> None:
        high_watermark = self.high_watermark
        waiters = self._waiters
        while waiters and waiters[0].required_offset <= high_watermark:
            waiters.popleft().callback(ErrorCode.none)

    def _fail_waiters(self, error: ErrorCode) -> None:
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            waiter.callback(error)

    # ----------------------------------------------------------------- replication

    def fetch_for_follower(self, replica: int, now: float) -> FollowerFetch | None:
        """One follower fetch: report the follower's position, return what it lacks.

        Returns None when the follower is up to date (or is not a follower). The caller appends
        the result with ``apply_fetch``, now or after a delay (a slow follower).
        """
        if self.leader < 0 or replica == self.leader or replica not in self._followers:
            return None
        log = self.logs[replica]
        if replica in self._needs_truncation:
            self._truncate_follower(replica)
        leader_log = self.logs[self.leader]
        fetch_offset = log.log_end_offset
        self._update_follower(replica, fetch_offset, now)
        if fetch_offset >= leader_log.log_end_offset:
            log.high_watermark = min(leader_log.high_watermark, log.log_end_offset)
            return None
        return FollowerFetch(
            self.leader_epoch,
            fetch_offset,
            leader_log.batches_from(fetch_offset),
            leader_log.high_watermark,
        )

    def apply_fetch(self, replica: int, fetched: FollowerFetch) -> bool:
        """Append fetched batches to the follower's log; False when the fetch went stale."""
        log = self.logs.get(replica)
        if (
            log is None
            or fetched.leader_epoch != self.leader_epoch
            or replica == self.leader
            or replica in self._needs_truncation
            or log.log_end_offset != fetched.fetch_offset
        ):
            return False
        log.append_replicated(fetched.batches)
        log.high_watermark = min(fetched.leader_high_watermark, log.log_end_offset)
        return True

    def _truncate_follower(self, replica: int) -> None:
        self._needs_truncation.discard(replica)
        log = self.logs[replica]
        leader_log = self.logs[self.leader]
        epoch = log.latest_epoch
        if epoch < 0:
            target = log.log_end_offset
        else:
            leader_epoch, leader_end = leader_log.end_offset_for_epoch(epoch)
            if leader_epoch < 0:
                target = log.log_start_offset
            elif leader_epoch == epoch:
                target = leader_end
            else:
                target = min(leader_end, log.end_offset_for_epoch(leader_epoch)[1])
        if target < log.log_end_offset:
            logger.info(
                "Replica %d of %s truncates its log from %d to %d to match leader %d (epoch %d)",
                replica,
                self.name,
                log.log_end_offset,
                target,
                self.leader,
                self.leader_epoch,
            )
            log.truncate_to(target)

    def _update_follower(self, replica: int, fetch_offset: int, now: float) -> None:
        # Kafka's Replica.updateFetchStateOrThrow
        state = self._followers[replica]
        leader_end = self.logs[self.leader].log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up = max(state.last_caught_up, now)
        elif fetch_offset >= state.last_fetch_leader_end:
            state.last_caught_up = max(state.last_caught_up, state.last_fetch_time)
        state.last_fetch_leader_end = leader_end
        state.last_fetch_time = now
        state.log_end = fetch_offset
        if (
            replica not in self.isr
            and fetch_offset >= self.high_watermark
            and fetch_offset >= self._epoch_start_offset
        ):
            self._set_isr(
                tuple(r for r in self.replicas if r in self.isr or r == replica),
                f"replica {replica} caught up to offset {fetch_offset}",
            )
        else:
            self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        if len(self.isr) < self.effective_min_isr:
            return  # strict min ISR (KIP-966): nothing becomes visible under the minimum
        leader_log = self.logs[self.leader]
        candidate = leader_log.log_end_offset
        followers = self._followers
        for replica in self.isr:
            if replica != self.leader:
                end = followers[replica].log_end
                if end < candidate:
                    candidate = end
        if candidate > leader_log.high_watermark:
            leader_log.high_watermark = candidate
            self._complete_waiters()
            self._listener.high_watermark_advanced(self)

    # ----------------------------------------------------------------- ISR and time

    def tick(self, now: float) -> None:
        """Leader housekeeping: shrink the ISR by lag time, expire acks=all waiters."""
        if self.leader < 0:
            return
        # Kafka's Replica.isCaughtUp: a follower whose last reported log end is the leader's
        # stays, however long ago it fetched (an idle partition keeps a follower that stopped
        # fetching until the leader appends; a stopped broker leaves when it is fenced).
        leader_end = self.logs[self.leader].log_end_offset
        lagging = [
            r
            for r in self.isr
            if r != self.leader
            and self._followers[r].log_end != leader_end
            and now - self._followers[r].last_caught_up > self.replica_lag_time_max_s
        ]
        if lagging:
            self._set_isr(
                tuple(r for r in self.isr if r not in lagging),
                f"replicas {lagging} were not caught up within "
                f"{round(self.replica_lag_time_max_s * 1000)} ms",
            )
        if self._waiters:
            expired = [w for w in self._waiters if w.deadline <= now]
            if expired:
                self._waiters = deque(w for w in self._waiters if w.deadline > now)
                for waiter in expired:
                    waiter.callback(ErrorCode.request_timed_out)

    def _set_isr(
        self,
        isr: tuple[int, ...],
        reason: str,
        elr: tuple[int, ...] | None = None,
        last_known_elr: tuple[int, ...] | None = None,
    ) -> None:
        elr = self.elr_after(isr) if elr is None else elr
        if last_known_elr is None:
            last_known_elr = () if self.leader >= 0 else self.last_known_elr
        if (isr, elr, last_known_elr) == (self.isr, self.elr, self.last_known_elr):
            return
        old = self.isr
        self.isr, self.elr, self.last_known_elr = isr, elr, last_known_elr
        self.partition_epoch += 1
        verb = "shrinks" if len(isr) < len(old) else "expands" if len(isr) > len(old) else "stays"
        logger.info(
            "ISR of %s %s from %s to %s, ELR %s (leader %d, epoch %d): %s",
            self.name,
            verb,
            list(old),
            list(isr),
            list(elr),
            self.leader,
            self.leader_epoch,
            reason,
        )
        if len(isr) < self.effective_min_isr:
            # Waiting acks=all writes stay waiting (KIP-966): see the module docstring.
            logger.warning(
                "%s is under min ISR: ISR %s < min.insync.replicas %d",
                self.name,
                list(isr),
                self.effective_min_isr,
            )
        elif self.leader >= 0:
            self._maybe_advance_high_watermark()
        self._listener.state_changed(self)

    def set_min_insync_replicas(self, value: int) -> None:
        self.min_insync_replicas = value
        if self.elr and len(self.isr) >= self.effective_min_isr:
            self._set_isr(self.isr, f"min.insync.replicas is now {value}", ())
        if self.leader < 0:
            return
        if len(self.isr) >= self.effective_min_isr:
            self._maybe_advance_high_watermark()

    # ----------------------------------------------------------------- controller decisions

    def remove_from_isr(self, broker: int, reason: str) -> None:
        """Controller: drop a fenced follower from the ISR (it stays eligible: ELR)."""
        if broker in self.isr and broker != self.leader:
            self._set_isr(tuple(r for r in self.isr if r != broker), reason)

    def change_isr(
        self,
        isr: tuple[int, ...],
        elr: tuple[int, ...],
        last_known_elr: tuple[int, ...],
        reason: str,
    ) -> None:
        """Controller: a new ISR and ELR for a partition whose leader stays."""
        self._set_isr(isr, reason, elr, last_known_elr)

    def elect(
        self,
        leader: int,
        isr: tuple[int, ...],
        now: float,
        reason: str,
        *,
        elr: tuple[int, ...] | None = None,
        last_known_elr: tuple[int, ...] = (),
    ) -> None:
        """Controller: install a new leader (``-1``: offline), ISR and ELR (by default what
        the ISR change implies), bumping the epoch."""
        old_leader = self.leader
        if self._waiters:
            self._fail_waiters(ErrorCode.not_leader_or_follower)
        self.elr = self.elr_after(isr) if elr is None else elr
        self.last_known_elr = last_known_elr
        self.leader = leader
        self.leader_epoch += 1
        self.partition_epoch += 1
        self.isr = isr
        self._needs_truncation = {r for r in self.replicas if r != leader}
        self._followers = {r: _Follower(now) for r in self.replicas if r != leader}
        if leader >= 0:
            self._epoch_start_offset = self.logs[leader].log_end_offset
            logger.info(
                "%s: leader %d -> %d, epoch %d, ISR %s, ELR %s (%s)",
                self.name,
                old_leader,
                leader,
                self.leader_epoch,
                list(isr),
                list(self.elr),
                reason,
            )
        else:
            logger.warning(
                "%s is offline: no eligible leader, epoch %d, ISR %s, ELR %s (%s)",
                self.name,
                self.leader_epoch,
                list(isr),
                list(self.elr),
                reason,
            )
        self._listener.state_changed(self)
        if leader >= 0:
            self._maybe_advance_high_watermark()

    def restart_follower(self, replica: int, now: float) -> None:
        """A broker came back: its replica must reconcile with the leader before following."""
        if replica == self.leader or replica not in self.replicas:
            return
        self._needs_truncation.add(replica)
        self._followers[replica] = _Follower(now)

    def close(self, error: ErrorCode) -> None:
        """The topic is gone: answer every waiting write."""
        self._fail_waiters(error)
