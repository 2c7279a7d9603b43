"""The one wall clock of the live processes: milliseconds since the epoch, as every record stores time.

The pure packages (core, policy, sim) never read it: they are handed `now_ms`.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
