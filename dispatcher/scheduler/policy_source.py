"""Where the live scheduler gets its policy: a TOML file, reloaded when it changes, or one applied
through Redis (`dispatch policy apply`, `rollback`), whichever changed last.

A policy that fails to parse is reported and the last good policy stays in force
(the way back to the last good policy). The policy in force is published to
Redis so that `dispatch why` and `dispatch policy show` on any host use the
same one, and the scheduler keeps the last ones it ran (store/policies.py).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..core.errors import ConfigError
from ..policy.config import PolicyConfig
from ..policy.profiles import PolicySet, parse_policy
from ..store.policies import read_policy

log = logging.getLogger("dispatch.policy")


def local_weekday_minute(t: float | None = None) -> tuple[int, int]:
    lt = time.localtime(t)
    return lt.tm_wday, lt.tm_hour * 60 + lt.tm_min


def load_policy_file(path: str | os.PathLike) -> tuple[PolicySet, str]:
    """(policy, text); ConfigError with the file name for a missing or bad file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read policy file {path}: {e.strerror or e}", key="policy") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); save the policy file as UTF-8",
                          key="policy") from None
    try:
        return parse_policy(text), text
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}", key=e.key) from None


class PolicySource:
    """The policy in force: a file's (reloaded when its mtime changes) or one a user applied through Redis
    (`dispatch policy apply` and `rollback`: store/policies.py), whichever changed last.

    `attach(client, ns)` turns the Redis side on (the Scheduler does): each refresh reads the applied
    policy's version (one HMGET) and the rest only when it moved. When a scheduler starts, an applied
    policy newer than its file (or with no file) is taken, so a restart does not undo an apply; a file
    edited after the apply wins. Nothing read from Redis can stop the scheduler: a text that does not
    parse, or a key of the wrong type, is logged once and the last good policy stays in force.
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self.policy = PolicySet()
        self.text = ""
        self.error = ""
        self.source = "(built-in defaults)"
        #: When the change that put this policy in force happened (file mtime or apply time), ms; 0: built in.
        self.changed_ms = 0
        self._mtime: float | None = None
        self.version = 0
        self._client = self._ns = None
        self._applied_seen: tuple | None = None
        self._applied_checked = False
        if self.path is not None:
            self.policy, self.text = load_policy_file(self.path)  # a bad file at start is fatal
            self._mtime = self.path.stat().st_mtime
            self.source, self.changed_ms, self.version = str(self.path), int(self._mtime * 1000), 1

    def attach(self, client, ns: str) -> None:
        """Also follow the policy applied in Redis under namespace `ns`."""
        self._client, self._ns = client, ns

    def refresh(self) -> bool:
        """Take a changed file or a newly applied policy; True when a new policy took effect."""
        found = [c for c in (self._changed_file(), self._changed_applied()) if c is not None]
        if not found:
            return False
        changed_ms, policy, text, source = max(found, key=lambda c: c[0])
        self.policy, self.text, self.source, self.changed_ms = policy, text, source, changed_ms
        self.error = ""
        self.version += 1
        log.info("policy now in force: %s", source)
        return True

    def _changed_file(self):
        if self.path is None:
            return None
        try:
            mtime = self.path.stat().st_mtime
        except OSError as e:
            if not self.error:
                self.error = f"cannot read {self.path}: {e.strerror}; keeping the last good policy"
                log.error(self.error)
            return None
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        try:
            policy, text = load_policy_file(self.path)
        except ConfigError as e:
            self.error = f"{e}; keeping the last good policy"
            log.error("policy reload failed: %s", self.error)
            return None
        return int(mtime * 1000), policy, text, str(self.path)

    def _changed_applied(self):
        if self._client is None:
            return None
        import redis

        from ..store.policies import read_applied, read_applied_version

        first, self._applied_checked = not self._applied_checked, True
        try:
            version = read_applied_version(self._client, self._ns)
            if version is None or version == self._applied_seen:
                return None
            applied = read_applied(self._client, self._ns)
        except redis.exceptions.ResponseError as e:  # e.g. a key of the wrong type: this costs the apply only
            self._applied_failed(f"cannot read the applied policy ({e})")
            return None
        if not applied:
            return None
        self._applied_seen = applied["changed"]
        if first and applied["applied_ms"] <= self.changed_ms:
            return None  # applied before the file this scheduler started with was last changed
        try:
            policy = parse_policy(applied["text"])
        except ConfigError as e:
            self._applied_failed(f"the policy applied from {applied['source'] or '?'} does not parse: {e}")
            return None
        return applied["applied_ms"], policy, applied["text"], applied["source"] or "(applied)"

    def _applied_failed(self, why: str) -> None:
        msg = f"{why}; keeping the last good policy"
        if msg != self.error:
            self.error = msg
            log.error("policy not applied: %s", msg)

    def current(self, t: float | None = None) -> tuple[str, PolicyConfig]:
        return self.policy.config_at(*local_weekday_minute(t))


def policy_in_force(client, ns: str, t: float | None = None):
    """(profile name, PolicyConfig, source) as the scheduler last published it; defaults if none did."""
    policy, source = published_policy(client, ns)
    profile, config = policy.config_at(*local_weekday_minute(t))
    return profile, config, source


def published_policy(client, ns: str) -> tuple[PolicySet, str]:
    """(the whole PolicySet, source) as the scheduler last published it; defaults if none did."""
    published = read_policy(client, ns)
    policy = PolicySet()
    if published.get("text"):
        try:
            policy = parse_policy(published["text"])
        except ConfigError:
            pass  # the scheduler only publishes what parsed; a hand-edited key falls back to defaults
    return policy, published.get("source", "(built-in defaults; no scheduler has run)")
