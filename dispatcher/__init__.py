"""dispatch: a Redis-backed GPU job dispatcher for lab clusters.

Importing this package has no side effects and imports neither Redis nor RQ:
the submit path stays fast and the policy core stays pure.
"""

__version__ = "0.1.0"
