"""Every Redis key and channel dispatch uses. No other module builds key strings.

Grammar: ``<ns>:<kind>:<id>[:<facet>]``, namespace ``dispatch`` by default.
RQ's own keys stay RQ's: each node's queue is the RQ queue ``node.<name>`` (see rq_queue_name).

| key                        | type   | written by                  | lifetime                         |
|----------------------------|--------|-----------------------------|----------------------------------|
| <ns>:seq:job               | string | submit (INCR)               | forever                          |
| <ns>:job:<id>              | hash   | submit, scheduler, agent    | until purged                     |
|   fields (their types and writers: store/job_record.py FIELDS, checked against this list):  |
|   spec, seal, state, node, gpus, attempt, epoch, submit_ms, assigned_ms, started_ms,       |
|   finished_ms, exit_code, reason, verdict, pid, cancel_ms, cancel_reason, preempting_ms, preempted_by,|
|   preempt_mode, preempt_reason, preemptions, last_preempted_ms, gpu_s_lost, checkpoint_ms, |
|   lost, pred_s, pred_conf, pred_runs, pred_src, pred_mem_gb, plan_est_s, peak_gpu_mem_gb,  |
|   warning, idle_since_ms, gang, ranks_left, ranks_ended, gang_end, rendezvous, progress_ms |
|   hold, notify, notified, notify_error, log_path, requeued, fp, failures                    |
| <ns>:job:<id>:log          | stream | agent (lua/log_append.lua)  | its latest 64 MiB, until purged  |
| <ns>:job:<id>:r<n>:log     | stream | agent of a gang's rank n>0  | until purged                     |
| <ns>:job:<id>:logsize      | hash   | lua/log_append.lua          | rank -> the bytes its log stream |
|                            |        |                             | took in all (the newest `o`)     |
| <ns>:job:<id>:attempts     | list   | finish.lua (RPUSH)          | one msgpack map per ended attempt|
| <ns>:job:<id>:tty:in       | stream | `dispatch shell`/`attach`   | an interactive job's keystrokes  |
|                            |        | (store/tty.py; XADD MAXLEN~)| and resizes; a day, 10 min after |
|                            |        |                             | its attempt ends (agent)         |
| <ns>:job:<id>:tty:out      | stream | agent (workers/tty.py)      | its terminal output, then "end"; |
|                            |        |                             | MAXLEN ~, 10 min after it ends   |
| <ns>:job:<id>:exit         | string | node keeper (store/exits.py)| a day: an attempt's exit seen while its agent could not report it |
| <ns>:history:<fp>          | list   | finish.lua (LPUSH, LTRIM)   | runs of one fingerprint that     |
|                            |        |                             | succeeded, newest first, msgpack |
|                            |        |                             | {d, e, m, t}; the latest         |
|                            |        |                             | predict.KEPT_PER_FINGERPRINT     |
| <ns>:user:<name>:history   | list   | finish.lua (LPUSH, LTRIM)   | the same for all of a user's     |
|                            |        |                             | jobs; predict.KEPT_PER_USER      |
| <ns>:jobs:all              | zset   | submit; id -> submit_ms     | until purged                     |
| <ns>:jobs:pending          | zset   | submit, scheduler, agent    | member removed when placed       |
| <ns>:jobs:active           | zset   | scheduler, agent            | id -> assigned_ms while held     |
| <ns>:jobs:ended:<state>    | zset   | finish, cancel, quarantine; | id -> finished_ms of the jobs    |
|                            |        | requeue removes             | that ended so (succeeded, failed,|
|                            |        |                             | cancelled): the ended-jobs page  |
| <ns>:jobs:changed          | set    | submit and every job script | ids whose record changed since   |
|                            |        |                             | the leader last read them        |
| <ns>:jobs:feed             | stream | the scheduler that takes    | each take of jobs:changed: n (a  |
|                            |        | jobs:changed (take_changed. | count), ids; every scheduler     |
|                            |        | lua, MAXLEN ~ FEED_KEPT)    | reads it from its own cursor     |
| <ns>:jobs:idle             | hash   | idle_warning.lua; leader    | id -> "<since_ms> <warning>" of  |
|                            |        | HDELs ended ids             | running jobs with an idle warning|
| <ns>:jobs:ended:recent     | list   | leading scheduler (LPUSH,   | the newest RECENT_ENDS ends it   |
|                            |        | LTRIM; store/cluster.py)    | saw, msgpack, newest first       |
| <ns>:jobs:notify           | list   | cancel.lua (RPUSH)          | ended jobs no agent ran whose    |
|                            |        |                             | --notify URL the leader POSTs to;|
|                            |        |                             | LPOPed by it (dispatcher/notify) |
| <ns>:node:<name>           | hash   | agent heartbeat             | info (msgpack), seen_ms, address |
| <ns>:node:<name>:control   | stream | scheduler, CLI (XADD)       | commands to the agent; group     |
|                            |        |                             | "agents", acked when carried out |
| <ns>:node:<name>:alloc     | hash   | scheduler commit, release   | gpu index -> job id while held,  |
|                            |        |                             | or "~id,id" for sharing jobs     |
| <ns>:nodes:heartbeat       | zset   | agent heartbeat             | name -> last seen ms             |
| <ns>:nodes:drain           | hash   | dispatch drain / resume     | name -> msgpack {reason, by,     |
|                            |        | (store/nodes.py)            | at_ms}: takes no new job; kept   |
|                            |        |                             | until `dispatch resume`          |
| <ns>:decisions             | list   | scheduler (LPUSH, LTRIM)    | the latest DECISIONS_KEPT        |
| <ns>:policy                | hash   | scheduler, on (re)load      | text, source, profile,           |
|                            |        |                             | loaded_ms, digest, number        |
| <ns>:policy:applied        | hash   | policy apply / rollback     | text, source, applied_ms,        |
|                            |        | (one MULTI, HINCRBY)        | version (polled each cycle)      |
| <ns>:policy:history        | list   | scheduler (LPUSH, LTRIM)    | the last HISTORY_KEPT policies   |
|                            |        | (store/policies.py)         | it ran, newest first, msgpack    |
| <ns>:seq:policy            | string | scheduler (INCR)            | history entry numbers, forever   |
| <ns>:auth                  | hash   | scheduler with a secret     | mode "hmac", admins: identity on |
| <ns>:requests              | stream | clients under identity      | signed submit/cancel/preempt     |
| <ns>:requests:done         | string | leading scheduler           | id of the last request handled   |
| <ns>:reply:<request id>    | list   | leading scheduler           | the answer, 60 s                 |
| <ns>:scheduler:leader      | string | leading scheduler (lease)   | "<token> <holder>", TTL lease_s  |
| <ns>:scheduler:token       | string | lease.lua (INCR)            | fencing tokens, forever          |
| <ns>:scheduler:stats       | hash   | leading scheduler, each cycle| cycles, placed, preempted,       |
|                            | (store/stats.py)            | requeued_lost, cycle_ms, at_ms,  |
|                            |        |                             | holder, pending, running,        |
|                            |        |                             | rest_reason, reservations, ...   |
| <ns>:scheduler:cluster     | string | leading scheduler, a full   | msgpack: every node's GPUs and   |
|                            |        | cycle a second (cluster.py) | the running jobs, for the board  |
| <ns>:metrics               | hash   | leading scheduler           | counters and histograms for      |
|                            |        | (store/counters.py)         | /metrics, forever (whoever leads)|
| <ns>:samples               | stream | leading scheduler           | cluster figures every 15 s for   |
|                            |        | (store/samples.py)          | the dashboard's charts and       |
|                            |        |                             | alerts; MAXLEN ~ 12 h of them    |
| <ns>:chan:events           | pubsub | everyone                    | wake-up only; losing one is fine |
| <ns>:quarantine            | stream | leading scheduler, agents   | index entries and keys set aside |
|                            |        | (store/quarantine.py)       | with the reason: key, member,    |
|                            |        |                             | score, reason, at_ms (moved_to); |
|                            |        |                             | MAXLEN ~ QUARANTINE_KEPT         |
| <ns>:quarantine:<key>:<ms> | any    | leading scheduler (RENAME)  | an index or record of the wrong  |
|                            |        |                             | type, kept for an operator;      |
|                            |        |                             | nothing reads or deletes it      |

IDs may not contain ':' (checked at the edge).
"""

DEFAULT_NS = "dispatch"


def job_seq(ns: str) -> str:
    return f"{ns}:seq:job"


def job(ns: str, job_id: str) -> str:
    return f"{ns}:job:{job_id}"


def job_log(ns: str, job_id: str, rank: int = 0) -> str:
    """The job's output stream; a gang's rank r > 0 has its own (`<ns>:job:<id>:r<r>:log`)."""
    return f"{ns}:job:{job_id}:log" if not rank else f"{ns}:job:{job_id}:r{int(rank)}:log"


def job_log_size(ns: str, job_id: str) -> str:
    """The bytes each rank's log stream took in all (lua/log_append.lua): rank -> total."""
    return f"{ns}:job:{job_id}:logsize"


def job_attempts(ns: str, job_id: str) -> str:
    return f"{ns}:job:{job_id}:attempts"


def job_tty(ns: str, job_id: str, direction: str) -> str:
    """An interactive job's terminal streams: "in" (client -> agent), "out" (agent -> client)."""
    if direction not in ("in", "out"):
        raise ValueError(f"a tty stream is 'in' or 'out', not {direction!r}")
    return f"{ns}:job:{job_id}:tty:{direction}"


def job_exit(ns: str, job_id: str) -> str:
    return f"{ns}:job:{job_id}:exit"


def history(ns: str, fp: str) -> str:
    return f"{ns}:history:{fp}"


def user_history(ns: str, user: str) -> str:
    return f"{ns}:user:{user}:history"


def jobs_all(ns: str) -> str:
    return f"{ns}:jobs:all"


def jobs_pending(ns: str) -> str:
    return f"{ns}:jobs:pending"


def jobs_active(ns: str) -> str:
    return f"{ns}:jobs:active"


def jobs_ended(ns: str, state: str) -> str:
    """The jobs that ended in final `state` (core.model.FINAL_STATES), by when they ended."""
    return f"{ns}:jobs:ended:{state}"


def jobs_changed(ns: str) -> str:
    return f"{ns}:jobs:changed"


def jobs_feed(ns: str) -> str:
    """The change feed: what the leader took of jobs_changed, each take an entry (store/feed.py), so that
    standbys keep their mirror of the queue current and a takeover costs what changed."""
    return f"{ns}:jobs:feed"


def jobs_notify(ns: str) -> str:
    """Ended jobs whose --notify URL the leading scheduler is to POST to (dispatcher/notify.py)."""
    return f"{ns}:jobs:notify"


def nodes_changed(ns: str) -> str:
    """Set of node names whose info (GPU list, CPUs, memory, blocked GPUs) changed since the leader
    last read them; a heartbeat that changes nothing of that leaves it alone."""
    return f"{ns}:nodes:changed"


def node(ns: str, name: str) -> str:
    return f"{ns}:node:{name}"


def node_alloc(ns: str, name: str) -> str:
    return f"{ns}:node:{name}:alloc"


def node_control(ns: str, name: str) -> str:
    return f"{ns}:node:{name}:control"


def nodes_heartbeat(ns: str) -> str:
    return f"{ns}:nodes:heartbeat"


def nodes_drain(ns: str) -> str:
    """Hash of drained nodes (`dispatch drain`): name -> msgpack {reason, by, at_ms}. Its own key, not
    a field of the node hash, so no heartbeat or agent restart touches it."""
    return f"{ns}:nodes:drain"


def decisions(ns: str) -> str:
    return f"{ns}:decisions"


def policy(ns: str) -> str:
    return f"{ns}:policy"


def policy_applied(ns: str) -> str:
    return f"{ns}:policy:applied"


def policy_history(ns: str) -> str:
    return f"{ns}:policy:history"


def policy_seq(ns: str) -> str:
    return f"{ns}:seq:policy"


def scheduler_leader(ns: str) -> str:
    return f"{ns}:scheduler:leader"


def scheduler_token(ns: str) -> str:
    return f"{ns}:scheduler:token"


def scheduler_stats(ns: str) -> str:
    return f"{ns}:scheduler:stats"


def scheduler_cluster(ns: str) -> str:
    return f"{ns}:scheduler:cluster"


def jobs_idle(ns: str) -> str:
    return f"{ns}:jobs:idle"


def jobs_ended_recent(ns: str) -> str:
    return f"{ns}:jobs:ended:recent"


def metrics(ns: str) -> str:
    return f"{ns}:metrics"


def samples(ns: str) -> str:
    return f"{ns}:samples"


def auth(ns: str) -> str:
    return f"{ns}:auth"


def requests(ns: str) -> str:
    return f"{ns}:requests"


def requests_done(ns: str) -> str:
    return f"{ns}:requests:done"


def reply(ns: str, request_id: str) -> str:
    return f"{ns}:reply:{request_id}"


def request_seen(ns: str, request_id: str) -> str:
    """Set by the leader when it handles request `request_id`, for as long as the request's signature
    is valid: a replay of it within that window is refused."""
    return f"{ns}:requests:seen:{request_id}"


def events(ns: str) -> str:
    return f"{ns}:chan:events"


def quarantine(ns: str) -> str:
    return f"{ns}:quarantine"


def quarantined(ns: str, key: str, at_ms: int) -> str:
    """Where a key of the wrong type is renamed aside: <ns>:quarantine:<key less its namespace>:<ms>."""
    rest = key[len(ns) + 1:] if key.startswith(f"{ns}:") else key
    return f"{ns}:quarantine:{rest}:{at_ms}"


def job_pattern(ns: str) -> str:
    """A SCAN pattern for the job hashes (and their facets: callers keep names with no ':' after the id)."""
    return f"{ns}:job:*"


def rq_queue_name(ns: str, node_name: str) -> str:
    """The RQ queue a node's agent listens on: node.<name> (RQ stores it as rq:queue:node.<name>).

    Under a namespace other than the default it is <ns>.node.<name>, so that two
    clusters sharing one Redis never take each other's work.
    """
    return f"node.{node_name}" if ns == DEFAULT_NS else f"{ns}.node.{node_name}"


def everything(ns: str) -> str:
    """An ACL key pattern for every key of the namespace (store/roles.py)."""
    return f"{ns}:*"
