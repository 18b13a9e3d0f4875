"""How many members the daemon's consumer group has (DescribeGroups, polled rarely).

Why: two daemons in one group split the partitions between them, so each exports half
the truth; two daemons on one state directory are stopped by the state lock, but one in
another pod with its own volume is not. A single-instance deployment that sees another
member logs a warning and exports ``mlmon_group_members``.

kafka-python's ``describe_groups`` cannot decode the authorized-operations field some
brokers (tansu) return, so the request is sent through the admin client's connection
manager and only the member list is read.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import DescribeGroupsRequest

from ..config import KafkaSettings
from .kafka import client_security

__all__ = ["GroupMembers"]

log = logging.getLogger(__name__)

# KafkaAdminClient logs its whole configuration, SASL password included, at DEBUG
_admin_log = logging.getLogger("kafka.admin.client")
if _admin_log.level == logging.NOTSET:
    _admin_log.setLevel(logging.INFO)


class GroupMembers:
    def __init__(self, k: KafkaSettings) -> None:
        self.group_id = k.group_id
        self._settings = k
        self._admin: Any = None

    def count(self) -> int:
        """Members of the group now; raises when the broker cannot be asked."""
        if self._admin is None:
            k = self._settings
            self._admin = KafkaAdminClient(
                bootstrap_servers=k.bootstrap_servers.split(","),
                client_id=f"{k.client_id}-admin",
                request_timeout_ms=10_000,
                **client_security(k),
            )
        admin = self._admin

        async def describe() -> int:
            coordinators = await admin._find_coordinator_ids([self.group_id])
            request = DescribeGroupsRequest(
                groups=[self.group_id], include_authorized_operations=False
            )
            response = await admin._manager.send(request, node_id=coordinators[self.group_id])
            return len(response.groups[0].members)

        return int(admin._manager.run(describe))

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
