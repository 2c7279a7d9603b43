"""Where the live scheduler gets its policy: a TOML file, reloaded when it changes.

A file that fails to parse is reported and the last good policy stays in force
(the way back to the last good policy). The policy in force is published to
Redis so that `dispatch why` and `dispatch policy show` on any host use the
same one.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .errors import ConfigError
from .policy.config import PolicyConfig
from .policy.profiles import PolicySet, parse_policy

log = logging.getLogger("dispatch.policy")


def local_weekday_minute(t: float | None = None) -> tuple[int, int]:
    lt = time.localtime(t)
    return lt.tm_wday, lt.tm_hour * 60 + lt.tm_min


def load_policy_file(path: str | os.PathLike) -> tuple[PolicySet, str]:
    """(policy, text); ConfigError with the file name for a missing or bad file."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read policy file {path}: {e.strerror or e}", key="policy") from None
    try:
        return parse_policy(text), text
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}", key=e.key) from None


class PolicySource:
    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self.policy = PolicySet()
        self.text = ""
        self.error = ""
        self._mtime: float | None = None
        self.version = 0
        if self.path is not None:
            self.policy, self.text = load_policy_file(self.path)  # a bad file at start is fatal
            self._mtime = self.path.stat().st_mtime
            self.version = 1

    def refresh(self) -> bool:
        """Reload if the file changed; True when a new policy took effect."""
        if self.path is None:
            return False
        try:
            mtime = self.path.stat().st_mtime
        except OSError as e:
            if not self.error:
                self.error = f"cannot read {self.path}: {e.strerror}; keeping the last good policy"
                log.error(self.error)
            return False
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            self.policy, self.text = load_policy_file(self.path)
        except ConfigError as e:
            self.error = f"{e}; keeping the last good policy"
            log.error("policy reload failed: %s", self.error)
            return False
        self.error = ""
        self.version += 1
        log.info("policy reloaded from %s", self.path)
        return True

    def current(self, t: float | None = None) -> tuple[str, PolicyConfig]:
        return self.policy.config_at(*local_weekday_minute(t))
