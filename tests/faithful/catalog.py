"""Every scenario by name, in the order of their numbers: what compare.py runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tests.faithful.backends import Backend
from tests.faithful.elections import last_isr_member_lost
from tests.faithful.groups import consumer_groups
from tests.faithful.scenarios import (
    Outcome,
    admin_requests,
    advertised_versions,
    idempotent_across_leader_change,
    isr_shrink_and_rejoin,
    leader_killed,
    min_isr_writes,
    requests_in_turn,
)

__all__ = ["SCENARIOS"]

SCENARIOS: Mapping[str, Callable[[Backend], Outcome]] = {
    "min_isr_writes": min_isr_writes,
    "isr_shrink_and_rejoin": isr_shrink_and_rejoin,
    "leader_killed": leader_killed,
    "last_isr_member_lost": last_isr_member_lost,
    "admin_requests": admin_requests,
    "consumer_groups": consumer_groups,
    "idempotent_across_leader_change": idempotent_across_leader_change,
    "advertised_versions": advertised_versions,
    "requests_in_turn": requests_in_turn,
}
