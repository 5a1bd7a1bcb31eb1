"""Auditing a log: an empty one is never reported as verified."""

from __future__ import annotations

from tether.events import GENESIS_HASH
from tether.policy.audit import AuditReport, audit_encoded, audit_events


def test_an_empty_log_is_not_verified() -> None:
    expected = AuditReport(
        run_id="",
        events=0,
        ok=False,
        bad_seq=0,
        problem="the log holds no events, so there is no chain to verify",
        last_hash=GENESIS_HASH,
    )

    assert audit_encoded([]) == expected
    assert audit_encoded([], expected_events=0) == expected
    assert audit_events([]) == expected
