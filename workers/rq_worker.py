"""The RQ worker a node agent runs its launches in: RQ's SimpleWorker (each launch in the agent's own
process, workers/jobs.py), whose command listener notices a stop within a second.

RQ listens for its worker commands in a redis-py PubSubWorkerThread that waits up to 60 s per read.
On a warm shutdown RQ sends UNSUBSCRIBE, then stops that thread and (redis-py 8) joins it with no
timeout. When the thread reads the UNSUBSCRIBE reply before the stop clears its running flag (likely
on a loaded machine), it goes back to wait, unsubscribed, the whole 60 s: a SIGTERM took a minute to
stop the agent, and `dispatch up` killed it after its own 60 s.
"""

from __future__ import annotations

import logging
import time

from rq import SimpleWorker

#: How long the command listener waits per read: the longest a stop waits for it.
LISTEN_S = 1.0
#: How long the worker's wait for work lasts at most (AgentWorker.dequeue_timeout).
WAKE_S = 1
#: RQ logs an ERROR at each try while the server is away (every 2 s here): one a minute is said.
SAY_AWAY_EVERY_S = 60.0


class _SeldomAway(logging.Filter):
    """Lets RQ's "could not connect to Redis instance ... retrying" through once per SAY_AWAY_EVERY_S (an
    outage filled the agent's log with one ERROR line every 2 s); every other record as it is."""

    def __init__(self):
        super().__init__()
        self.said = -SAY_AWAY_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if "could not connect to Redis instance" not in str(record.msg):
            return True
        now = time.monotonic()
        if now - self.said < SAY_AWAY_EVERY_S:
            return False
        self.said = now
        return True


logging.getLogger("rq.worker").addFilter(_SeldomAway())


class AgentWorker(SimpleWorker):
    #: The longest RQ's wait for work (BLMOVE) lasts before its loop comes round again (RQ's: 405 s). A
    #: SIGTERM the kernel hands to another of the agent's threads does not interrupt the main thread's
    #: wait, and Python runs its handler only when that wait returns: `dispatch up` then waited its whole
    #: 60 s for an idle agent to stop, and killed it.
    dequeue_timeout = WAKE_S

    #: Its longest wait between tries while the server is away (RQ's is 60 s): a job placed here as the
    #: server came back waited up to a minute, its GPUs held, for its launch to be read.
    max_connection_wait_time = 2.0

    #: A warm shutdown was asked (SIGINT/SIGTERM). RQ's own flag is set only while busy, and while the
    #: server is away its teardown fails past the StopRequested: the agent reads this instead of taking
    #: the error for a lost server and starting a new worker (a stop `dispatch up` then waited 60 s for).
    stop_asked = False

    #: Set by a second SIGINT/SIGTERM (the node agent's: NodeAgent.hurry).
    hurry = None

    #: Set by a SIGINT/SIGTERM the agent's own handler took (NodeAgent._stop): one that came after the agent
    #: looked at it and before RQ put in its handlers was lost, and the worker waited in BLPOP for minutes
    #: (`dispatch up` stopped its agent only after its own 60 s).
    asked = None

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()
        if self.asked is not None and self.asked.is_set():  # (RQ's loop looks at this before its first wait)
            self.stop_asked = self._stop_requested = True

    def request_stop(self, signum, frame) -> None:
        self.stop_asked = True
        super().request_stop(signum, frame)

    def request_force_stop(self, signum, frame) -> None:
        """A second SIGINT/SIGTERM: the agent's hurry (its jobs killed at once, still recorded requeued),
        not RQ's cold shutdown, whose SystemExit wherever the main thread was left them unrecorded
        (counted as lost attempts by the next agent)."""
        if self.hurry is None:
            super().request_force_stop(signum, frame)
        else:
            self.hurry.set()

    def subscribe(self) -> None:
        """As RQ's (2.x, 3.x), with LISTEN_S for the listener's wait."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(sleep_time=LISTEN_S, daemon=True,
                                                       exception_handler=self._listener_error)

    def _listener_error(self, exc: Exception, pubsub, thread) -> None:
        """A Redis error in the command listener (dispatch sends it no command): wait and listen again, as
        RQ's own handler does for a lost connection only; any other (a MISCONF of a full disk) ended the
        thread with a traceback in the agent's log."""
        import redis

        if not isinstance(exc, redis.exceptions.RedisError):
            raise exc
        self.log.debug("Worker %s: command listener: %s; listening again in 2 s", self.name, exc)
        time.sleep(2.0)
