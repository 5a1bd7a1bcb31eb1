"""Identifiers: run ids sort by creation time (UUIDv7 layout)."""

from __future__ import annotations

import random
import re
import time

__all__ = ["RUN_ID", "new_run_id"]

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}")
"""What a run id a caller chooses may be: it names files (``log_dir``), rows and URLs."""


def new_run_id() -> str:
    """A UUIDv7-style id: 48 bits of Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = random.getrandbits(80)  # unique, not secret: the module reseeds itself after fork
    value = (ms << 80) | rand
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    h = "%032x" % value  # noqa: UP031 - the fastest formatting here
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
