"""The API versions minibroker serves, advertised in ApiVersions exactly as implemented.

Ranges start at kio's lowest version (Kafka 4's baseline) and stop where the three supported
clients stop or where the next version would need something minibroker does not keep (Fetch 13+
and OffsetCommit/OffsetFetch 10 name topics by id; Produce 11+ only adds KIP-951 fields).
Observed picks (librdkafka 2.16 / aiokafka 0.14 / kafka-python 3.0) are in the comments.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["API_NAMES", "SUPPORTED_VERSIONS", "is_supported"]

SUPPORTED_VERSIONS: Mapping[int, tuple[int, int]] = {
    0: (3, 10),  # Produce: 10 / 7 / 9
    1: (4, 12),  # Fetch: 12 / 11 / 12
    2: (1, 7),  # ListOffsets: 7 / 3 / 7
    3: (0, 12),  # Metadata: 12 / 5 / 12
    8: (2, 9),  # OffsetCommit: 9 / 3 / 8
    9: (1, 9),  # OffsetFetch: 9 / 3 / 8
    10: (0, 6),  # FindCoordinator: 2 / 1 / 6
    11: (0, 7),  # JoinGroup: 5 / 5 / 7
    12: (0, 4),  # Heartbeat: 3 / 1 / 4
    13: (0, 5),  # LeaveGroup: 1 / 1 / 5
    14: (0, 5),  # SyncGroup: 3 / 3 / 5
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    18: (0, 4),  # ApiVersions: 3 / 0 / 4
    19: (2, 7),  # CreateTopics: 4 / 3 / 7
    20: (1, 6),  # DeleteTopics: 4 / 3 / 6
    22: (0, 4),  # InitProducerId: 4 / 0 / 4
    32: (1, 4),  # DescribeConfigs: 1 / 2 / 4
    33: (0, 2),  # AlterConfigs
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups: 2 / - / 2 (Kafka 4.4: 0-3; kio stops at 2)
    44: (0, 1),  # IncrementalAlterConfigs
    60: (0, 2),  # DescribeCluster: - / - / 2
    75: (0, 0),  # DescribeTopicPartitions (KIP-966; the Java admin client's describeTopics)
}

API_NAMES: Mapping[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    22: "InitProducerId",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    37: "CreatePartitions",
    42: "DeleteGroups",
    44: "IncrementalAlterConfigs",
    60: "DescribeCluster",
    75: "DescribeTopicPartitions",
}


def is_supported(api_key: int, api_version: int, available: Mapping[int, tuple[int, int]]) -> bool:
    bounds = available.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]
