"""Every bound in txmq, with the reason for its value.

Owns: constants only, grouped by subsystem (records, store, transactions, producers, consumers,
gRPC, channels, Spark, security, clusters, replication, dashboard, demo). TigerStyle: "put a
limit on everything". Relationships between limits are
checked at import time, so an inconsistent edit fails at once rather than under load.
Configurable values (StoreConfig, BrokerConfig) default to these, validated against the maxima.
"""

from __future__ import annotations

from typing import Final

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

# --- Records, messages and topics. ----------------------------------------------------------------
# RocketMQ's default maximum message body is 4 MiB; we match it so clients behave the same.
BODY_SIZE_MAX_DEFAULT: Final = 4 * MiB
# Hard ceiling for a configured body maximum: a record must fit a segment with room to spare.
BODY_SIZE_MAX_LIMIT: Final = 64 * MiB
# Properties (keys, tag, user properties) are metadata, not payload; 32 KiB is RocketMQ's bound
# on the properties block (it stores the length in a 2-byte short).
PROPERTIES_SIZE_MAX: Final = 32 * KiB - 1
TOPIC_NAME_LENGTH_MAX: Final = 127
GROUP_NAME_LENGTH_MAX: Final = 255
TAG_LENGTH_MAX: Final = 255
KEY_LENGTH_MAX: Final = 255
KEYS_PER_MESSAGE_MAX: Final = 32
MESSAGE_ID_LENGTH_MAX: Final = 128
BORN_HOST_LENGTH_MAX: Final = 255
# A born timestamp (ms since the epoch) is at most the end of year 9999, as Spark's timestamps
# and Java's Instant-based clients expect; in microseconds it still fits an int64.
BORN_TIMESTAMP_MS_MAX: Final = 253_402_300_799_999
QUEUES_PER_TOPIC_MAX: Final = 256
# Topics one broker keeps: each costs a registry row, and each of its queues a consume-queue
# directory and a delivery book per group; with auto-creation on, a caller naming topics must
# not grow them without end. (Consumer groups are bounded by CONSUMER_QUEUES_MAX positions.)
TOPICS_MAX: Final = 10_000
SEGMENT_SIZE_DEFAULT: Final = 1 * GiB
# Fixed per-record header bytes are counted in format/record.py; this bounds one encoded record.
RECORD_SIZE_MAX: Final = BODY_SIZE_MAX_LIMIT + PROPERTIES_SIZE_MAX + 4 * KiB
# Seconds beyond this are not a plausible date (year 5138): the value is milliseconds.
TIMESTAMP_SECONDS_PLAUSIBLE_MAX: Final = 10**11

# --- Store: commit log, disk space, flush and retention. ------------------------------------------
# Tests use small segments; below 64 KiB a default-sized record could not fit with its header.
SEGMENT_SIZE_MIN: Final = 64 * KiB
SEGMENT_SIZE_MAX: Final = 4 * GiB
# Space is reserved on disk (fallocate) this far ahead of the log's write position, so no log
# write can meet a full disk half-way (ADR 0003): one reservation per 16 MiB written, and a new
# store on a small test disk does not claim a whole 1 GiB segment at once.
SEGMENT_RESERVE_AHEAD_BYTES: Final = 16 * MiB
# Derived data is reserved the same way, at append time, before the log write (ADR 0003): each
# consume queue this many entries ahead (20 KiB; a broker with 800 queues claims 16 MiB), the
# message index this many bytes ahead (16 Ki entries). A derived write then never meets ENOSPC.
CONSUME_QUEUE_RESERVE_AHEAD_ENTRIES: Final = 1024
INDEX_RESERVE_AHEAD_BYTES: Final = 256 * KiB
# Space the store keeps reserved for derived data, the checkpoint and the broker's state files,
# given back when the disk fills (store/files/ballast.py): enough for a clean stop and a restart.
STORE_RESERVE_BYTES: Final = 8 * MiB
# Damaged commit-log records remembered for the store's health report (the count goes on).
DAMAGED_RECORDS_REPORTED_MAX: Final = 1000
# The background scrub verifies at most this many log bytes per step (one step per second):
# 4 MiB of CRC, header and queue-entry checks cost ~43 ms of CPU with 1 KiB records (~4 % of
# a core, measured), and a 1 GiB log is covered in about four minutes.
SCRUB_BYTES_PER_STEP: Final = 4 * MiB
# ... then rests this long after each whole pass (bit rot is slow; reads check what they serve).
SCRUB_PASS_PAUSE_MS: Final = 10 * 60_000
# ASYNC flush mode: how long an acknowledged write may stay only in the page cache.
FLUSH_INTERVAL_MS_DEFAULT: Final = 500
# Group commit (store/write/group_commit.py): after a group of 2+ writes the flusher lingers up to
# LINGER_US for as many writes as were lately outstanding at once (<= WRITERS_MAX); a lone writer
# never waits.
GROUP_COMMIT_LINGER_US_DEFAULT: Final = 8_000
GROUP_COMMIT_LINGER_US_MAX: Final = 1_000_000
GROUP_COMMIT_WRITERS_MAX: Final = 4096
# Retention: whole segments older than this are deleted (RocketMQ's default is 72 h).
RETENTION_MS_DEFAULT: Final = 72 * 3600 * 1000
# Writes are refused above this share of disk used instead of filling the disk.
DISK_WATERMARK_DEFAULT: Final = 0.90

# --- Store: consume queues, index and reads. ------------------------------------------------------
# 8-byte commit-log offset + 4-byte size + 8-byte tag hash, as RocketMQ's CQ_STORE_UNIT_SIZE.
CONSUME_QUEUE_ENTRY_SIZE: Final = 20
CONSUME_QUEUE_ENTRIES_PER_FILE: Final = 300_000
READ_BATCH_MAX: Final = 1024
# Scans for a tag or SQL92 filter stop after this many entries so one read cannot walk a whole
# queue.
READ_SCAN_ENTRIES_MAX: Final = 32 * READ_BATCH_MAX
# A read with a record predicate (a SQL92 filter) decodes and evaluates every record it scans,
# ~5 us each, under the consumer positions' lock that acks on the event loop wait for: a receive
# stops after this many records per queue (one read), and the long poll looks on at once while
# a look moves the scan (consume/receive.py), so a backlog the filter skips is still crossed at
# the speed of decoding, in steps of a few milliseconds.
READ_FILTER_RECORDS_MAX: Final = 1024
FIND_BY_KEY_RESULTS_MAX: Final = 64
# Queue records kept as written (recent.py): ~230 of 1 KiB, small beside the CPU's caches.
RECENT_RECORDS_BYTES_MAX: Final = 256 * KiB
RECENT_RECORD_BYTES_MAX: Final = 16 * KiB
# Bulk reads: spans at most this far apart share one pread, up to this many bytes per pread.
READ_RUN_GAP_MAX: Final = 16384
READ_RUN_BYTES_MAX: Final = 8 * MiB
# Bound on chain steps per lookup, so one hot key cannot make a lookup walk without limit.
INDEX_CHAIN_STEPS_MAX: Final = 4096

# --- Transactions. --------------------------------------------------------------------------------
# RocketMQ defaults (BrokerConfig): transactionTimeOut 6000 ms, transactionCheckInterval 30000 ms,
# transactionCheckMax 15.
TRANSACTION_TIMEOUT_MS_DEFAULT: Final = 6_000
TRANSACTION_CHECK_INTERVAL_MS_DEFAULT: Final = 30_000
TRANSACTION_CHECK_MAX_DEFAULT: Final = 15
# Backoff between checks grows to at most this.
TRANSACTION_CHECK_INTERVAL_MS_MAX: Final = 10 * 60_000
# A tick sends at most this many check-backs, so a backlog never becomes a check storm.
TRANSACTION_CHECKS_PER_TICK_MAX: Final = 256
TRANSACTIONS_PENDING_MAX: Final = 1_000_000
# Decided outcomes are kept this long so a repeated decision returns the first outcome.
TRANSACTION_OUTCOME_RETENTION_MS: Final = 24 * 3600 * 1000
TRANSACTION_OUTCOMES_MAX: Final = 1_000_000
# Per-tick budget for popping stale heap entries, so one tick's work stays bounded.
STALE_CHECK_POPS_PER_TICK_MAX: Final = 16 * TRANSACTION_CHECKS_PER_TICK_MAX
# Broker settings a configuration may choose (broker/config/broker_config.py refuses values outside
# them).
# A check-back more often than every 100 ms would be a busy loop against producers.
TRANSACTION_CHECK_INTERVAL_MS_MIN: Final = 100
# Check-backs before rollback, deliveries before the DLQ: past a thousand a message is stuck.
TRANSACTION_CHECK_MAX_LIMIT: Final = 1000
DELIVERY_ATTEMPTS_MAX_LIMIT: Final = 1000
# The background loops' period: 10 ms is already busy; 10 s would delay check-backs and messages.
TICK_MS_MIN: Final = 10
TICK_MS_LIMIT: Final = 10_000
# Dead (max-checks) transactions kept for operators in memory; older ones drop off the list but
# their copy stays in DEAD_TRANSACTION_TOPIC until retention deletes it.
TRANSACTIONS_DEAD_MAX: Final = 100_000
# Records read per Store.scan call while replaying the log into the pending set.
TRANSACTION_REPLAY_BATCH: Final = 4096
# Transaction ids drawn per os.urandom call (txn/ids.py): each call releases the GIL, which on
# the broker's event loop costs a hand-off to another thread; 256 ids are 4 KiB of randomness.
TRANSACTION_ID_POOL_IDS: Final = 256
# Half records kept in memory between prepare and decision so a commit need not read its half
# back from disk; beyond this many bytes the oldest are dropped and read back when decided.
TRANSACTION_HALF_CACHE_BYTES: Final = 16 * MiB

# --- Producers. -----------------------------------------------------------------------------------
# Producer send retries the client performs on a retriable status (its own backoff).
PRODUCER_ATTEMPTS_MAX: Final = 3
# Due delayed messages re-appended per tick, as one batch (one fsync): a long backlog drains
# over several ticks instead of stalling one.
DELAY_RELEASE_PER_CALL_MAX: Final = 256
# Bytes of message bodies per append_many in a batched send: a few MiB keeps one write short
# and far below a segment, whatever the bodies' sizes.
SEND_BATCH_BODY_BYTES_MAX: Final = 4 * MiB
# Messages in one SendMessage (more are refused; the Spark sink sends this many, clients one).
SEND_BATCH_MAX: Final = 64

# --- Consumers. -----------------------------------------------------------------------------------
# RocketMQ: 16 reconsume attempts, then %DLQ%group.
DELIVERY_ATTEMPTS_MAX_DEFAULT: Final = 16
INVISIBLE_DURATION_MS_MIN: Final = 1_000
INVISIBLE_DURATION_MS_MAX: Final = 12 * 3600 * 1000
LONG_POLLING_TIMEOUT_MS_MAX: Final = 30_000
RECEIVE_BATCH_MAX: Final = 32
INFLIGHT_PER_GROUP_QUEUE_MAX: Final = 10_000
# Record bytes one ReceiveMessage stream may hold before gRPC takes them (broker/consume/flow.py): a
# batch stops before passing it (one record always goes). 8 MiB is two maximum-size default
# bodies; a client that never reads pins at most this much.
RECEIVE_STREAM_BYTES_MAX: Final = 8 * MiB
# ... and all streams together: beyond it receives wait, then get fewer messages or none.
RECEIVE_BYTES_HELD_MAX: Final = 128 * MiB
# A receive whose queues end at most this many entries past the group's ack offset reads only
# records written lately (still in the page cache), so the broker serves it on its event loop
# instead of paying an executor round trip (two thread hand-offs); a group further behind may
# read cold records from disk, which must not stall the loop, so its receives stay in a thread.
RECEIVE_ON_LOOP_LAG_MAX: Final = 1024
# A receipt handle (broker/consume/receipt.py) is base64 of a fixed head, the group and topic names
# and
# a keyed tag: at most 2,090 characters with the name bounds above (4 UTF-8 bytes a character).
# Longer text is refused before it is decoded; receipt.py checks at import that its longest
# handle fits.
RECEIPT_HANDLE_LENGTH_MAX: Final = 4 * KiB
GRPC_MESSAGE_SIZE_MAX: Final = BODY_SIZE_MAX_LIMIT + 1 * MiB
# How many custom backoff steps a consumer is told; RocketMQ retries at most 16 times with a
# growing delay, so more steps would never be used by its clients.
CONSUMER_BACKOFF_STEPS_MAX: Final = 16
# Store reads one receive may make per queue; each advances the scan, so this only stops a
# pathological filter from turning one receive into a walk over the whole queue.
RECEIVE_SCANS_PER_QUEUE_MAX: Final = 8
# Last attempts dead-lettered per sweep (one a second), so one sweep's appends stay short.
DEAD_LETTERS_PER_SWEEP_MAX: Final = 256
# Clients ack what one receive returned, at most RECEIVE_BATCH_MAX; allow a few receives' worth.
ACK_ENTRIES_MAX: Final = 8 * RECEIVE_BATCH_MAX
# Subscriptions name a handful of tags; a bound keeps one request from building a huge set.
TAGS_PER_EXPRESSION_MAX: Final = 64
# SQL92 filters (consume/sql92.py): every message a filtered receive scans is evaluated against
# the expression, on the event loop for a receive near the queue's end (RECEIVE_ON_LOOP_LAG_MAX
# messages at most), so its size is bounded: characters (an IN list of a hundred UUIDs fits),
# terms (each costs a call per message; real filters have a few dozen) and nesting (parentheses,
# NOT, signs and chained comparisons: parsing and evaluating recurse that deep).
SQL_FILTER_LENGTH_MAX: Final = 8 * KiB
SQL_FILTER_NODES_MAX: Final = 256
SQL_FILTER_DEPTH_MAX: Final = 32
# Parsed SQL92 filters kept for the next receive of the same subscription (consume/filter.py).
SQL_FILTER_CACHE_MAX: Final = 256
# Long polls are capped below the official client's own receive deadline, so the broker
# answers "no message" before the client gives up on the call.
LONG_POLLING_TIMEOUT_REPLY_MS_MAX: Final = 20_000
# (group, topic, queue) positions a broker tracks; each costs a delivery book in memory and a row
# in the positions file, so a client inventing group names cannot grow them without end.
CONSUMER_QUEUES_MAX: Final = 100_000

# --- gRPC, client sessions and Telemetry. ---------------------------------------------------------
# The first Settings reply on a Telemetry stream is sent again after each of these delays. The
# Node.js client (rocketmq-client-nodejs 1.0.8) with several topics fetches their routes one by
# one after opening the stream and only then starts waiting for the reply, so a prompt reply is
# dropped and its startup() hangs forever; a repeat reaches it once the routes are in. Other
# clients just apply the same settings again. Longest delay: routes of many topics on a loaded
# machine.
SETTINGS_REPEAT_DELAYS_MS: Final = (250, 1_000, 4_000)
# A PEM chain larger than this is not a certificate file (a typo pointing at a data file).
PEM_FILE_SIZE_MAX: Final = 1 * MiB
# Check-back commands waiting on one stream; a producer that stops reading gets its checks
# deferred rather than growing the broker's memory. The queue itself is unbounded so that a
# settings reply or the end-of-stream marker can always be queued; only ``push`` is bounded.
TELEMETRY_OUTBOX_MAX: Final = 1024
# Methods one server registers (17 v2 RPCs and the txmq channels); the handler cache is bounded
# by what the server registered, this only asserts it.
SERVER_METHODS_MAX: Final = 64

# --- Admin and data channels. ---------------------------------------------------------------------
# A record pull (txmq.data.v1.Data/PullRecords) answers at most this many record bytes, or one
# record when a single one is larger; its 4-byte length and JSON header fit in what is left.
PULL_BYTES_MAX: Final = 8 * MiB
# ... and at most this many records: ~8 MiB of 1 KiB messages, so a bulk reader pays one call
# per ~7,000 records rather than per 1,024 (each call costs far more than reading a record).
PULL_COUNT_MAX: Final = 8192
PULL_HEADER_SIZE_MAX: Final = 4 * KiB
CLIENTS_MAX: Final = 10_000
# Messages one MessageFind (admin channel, ``txmq message find --max``) returns by default and
# at most: a lookup by key is for a person or the sink ledger, not a bulk read.
MESSAGE_FIND_RESULTS_DEFAULT: Final = 32
MESSAGE_FIND_RESULTS_MAX: Final = 1000
# Rows in one page of an admin listing (TxnList, TopicList, GroupList) and the JSON bytes a page
# may reach: a pending transaction is ~330 bytes, so an unpaged TxnList passed gRPC's 4 MiB
# default message size at ~12,000 pending. 1 MiB pages stay far below it whatever a row holds.
ADMIN_PAGE_ROWS_MAX: Final = 1000
ADMIN_PAGE_BYTES_MAX: Final = 1 * MiB
# Pages a client follows for one listing: every pending and dead transaction, one row a page.
ADMIN_PAGES_MAX: Final = TRANSACTIONS_PENDING_MAX + TRANSACTIONS_DEAD_MAX + 1
# One DLQ re-drive call (broker/admin/redrive.py) copies at most this many dead letters, of at
# most this many bytes of records (the first always goes), in one append with its position: an
# append holds the writer lock and one fsync for all, and its reply lists each message. The
# client repeats the call until the DLQ is done; a call's own batch is all or nothing.
REDRIVE_BATCH_MAX: Final = 256
REDRIVE_BATCH_BYTES_MAX: Final = 4 * MiB
# Calls one `txmq group redrive` makes per broker: 10 million dead letters, then it says so.
REDRIVE_CALLS_MAX: Final = 40_000
# Messages one admin view returns (a DLQ's newest messages, a topic's newest): a page, not a dump.
ADMIN_VIEW_MESSAGES_MAX: Final = 100

# --- Spark connector and transactional sink. ------------------------------------------------------
# Ledger records per key read back; one is normal, more only if a commit was retried.
LEDGER_RECORDS_PER_KEY_MAX: Final = 8
# Transient failures (broker restarting, connection reset) are retried this many times in all.
SPARK_CALL_ATTEMPTS_MAX: Final = 4
# A call to a replica group fails over to its next replica while the one asked does not answer
# or does not lead, for up to this long (a failover takes 3-7 s, ADR 0006), in at most this many
# calls (the deadline is the bound; the count keeps the loop finite whatever the clock does).
SPARK_FAILOVER_S_MAX: Final = 30.0
SPARK_FAILOVER_TURNS_MAX: Final = 256
# Times one partition may find its next offset deleted by retention and skip ahead.
SPARK_DATA_LOSS_SKIPS_MAX: Final = 3
# Rows per RecordBatch handed to Spark: large enough to amortise Arrow's per-batch cost, small
# enough that a batch of 4 MiB bodies stays bounded in memory (Spark copies each batch).
SPARK_ROWS_PER_BATCH_MAX: Final = 4096
# ... and at most this many bytes of pulled records per RecordBatch (Spark copies each batch).
# Distinct from SEND_BATCH_BODY_BYTES_MAX (the broker's write batch).
SPARK_BATCH_BYTES_MAX: Final = 64 * MiB
# Messages of one producer tend to carry the same properties: parsed JSON is reused by its
# bytes, for at most this many distinct values per batch.
SPARK_PROPERTIES_CACHE_MAX: Final = 256
# Average field size up to which a numpy gather beats joining slices (measured: ~0.6 us per
# slice against a few ns per gathered byte).
SPARK_GATHER_BYTES_PER_ROW_MAX: Final = 128
# A batch's variable-length columns use 32-bit Arrow offsets.
ARROW_COLUMN_BYTES_MAX: Final = 2**31 - 1
# Decoded sink-ledger records the broker's check-back keeps (by batch key): a ledger record is
# written once per batch and never changes, and every half of a batch is checked against it, so
# decoding it once per half made check-back O(halves x ledger size). A handful of batches are
# ever being decided at once.
SINK_LEDGER_CACHE_KEYS_MAX: Final = 16
# A bundle (many messages in one transaction, txn/bundle.py) is one half record: its bytes stay
# well below the default body size limit (4 MiB) so that limit need not be raised for it, and a
# task with a few in flight holds a few MiB. Messages per bundle: an append_many counts a batch
# in a u16, and 8,192 records of ~128 bytes still fit in these bytes.
SINK_BUNDLE_BYTES_MAX: Final = 1 * MiB
SINK_BUNDLE_MESSAGES_MAX: Final = 8192
# A sink task waits out the broker's back-pressure (disk watermark, pending transactions at
# their maximum, broker restarting) with doubling pauses up to this long in all, then fails.
SINK_BUSY_RETRY_S_MAX: Final = 300.0
SINK_BUSY_BACKOFF_S_MIN: Final = 0.05
SINK_BUSY_BACKOFF_S_MAX: Final = 5.0
# Bundles a sink task fills at once (one per topic its rows go to); more topics flush them all.
SINK_OPEN_BUNDLES_MAX: Final = 16

# --- Authentication and authorization (docs/security.md). -----------------------------------------
# An authorization header longer than this is refused unparsed: the official clients send ~120
# bytes (scheme, a short access key, one signed header, 40 hex digits).
AUTH_HEADER_LENGTH_MAX: Final = 1 * KiB
ACCESS_KEY_LENGTH_MAX: Final = 128
# Secrets shorter than this are refused at load: an HMAC key of a few characters is guessable
# offline from one captured header.
SECRET_KEY_LENGTH_MIN: Final = 16
SECRET_KEY_LENGTH_MAX: Final = 256
# How far time zones are from UTC: UTC+14 the farthest (UTC-12 on the other side).
TIME_ZONE_OFFSET_MS_MAX: Final = 14 * 3600 * 1000
# How far a signed x-mq-date-time may be from the broker's clock (UTC), either side, by default
# (``auth_date_skew_s``). The signature covers the date only (not the request), so this bounds
# how long a captured header stays usable: the window is twice this wide.
AUTH_DATE_SKEW_S_DEFAULT: Final = 15 * 60
# ... and at most: rocketmq-python-client 5.1.2 writes its *local* time with a "Z" suffix, so a
# client that runs outside UTC is off by its zone's offset (UTC-12 .. UTC+14) on top of the
# skew. Widening to this admits any zone (a window of 28.5 hours).
AUTH_DATE_SKEW_S_MAX: Final = 14 * 3600 + AUTH_DATE_SKEW_S_DEFAULT
# Verified (access key, date) -> expected signature entries kept; a client signs a new date each
# second, so this covers thousands of active clients for one second each.
AUTH_SIGNATURE_CACHE_MAX: Final = 4096
# Client ids remembered with the access key that first used them (a client id cannot be taken
# over by another user's credentials, which would redirect that producer's check-backs), in all
# and per access key: far below the total, so that no user alone fills the table; a key at its
# bound whose client ids all have an open Telemetry stream is refused a new one
# (broker/security/client_ids.py). A fleet of 1,000 live clients sharing one key fits.
AUTH_CLIENT_IDS_MAX: Final = CLIENTS_MAX
AUTH_CLIENT_IDS_PER_KEY_MAX: Final = 1_000
# Users and patterns in one ACL file.
ACL_USERS_MAX: Final = 10_000
ACL_PATTERNS_PER_USER_MAX: Final = 1_000
ACL_FILE_SIZE_MAX: Final = 4 * MiB
# Refusal lines logged per second: a client retrying bad credentials in a loop must not fill
# the log; the rest are counted (txmq_calls_refused) and summed up in the next line.
REFUSAL_LOG_LINES_PER_SECOND_MAX: Final = 10

# --- Clusters (docs/adr/0004-cluster-topic-definitions.md). ---------------------------------------
# Brokers in one cluster file: each member is probed and reconciled by every other one, so the
# cost grows with the square of this; 64 covers one broker per core of a large machine.
CLUSTER_MEMBERS_MAX: Final = 64
# How often a broker probes its peers (liveness for the route) and pulls their topic
# definitions; a member that missed a topic create has it within about this long.
CLUSTER_PROBE_PERIOD_MS: Final = 2_000
# Deadline of one call to a peer (probe, forwarded topic create or delete): short, because a
# dead peer must not hold an operator's `topic create` for long.
CLUSTER_PEER_CALL_TIMEOUT_MS: Final = 1_500
# A peer missing this many probes in a row leaves the routes this broker answers until a probe
# succeeds again, so producers stop picking its queues (the official client retries elsewhere);
# three, so a loaded machine's one slow answer does not take a live member out of the routes.
CLUSTER_PROBE_MISSES_MAX: Final = 3
# A deleted topic's name is not re-imported from a peer for this long, so a delete that reached
# the members one after the other is not undone by a reconcile that ran in between.
CLUSTER_TOMBSTONE_MS: Final = 600_000
# Topics imported per peer per probe; the rest come at the next probe.
CLUSTER_RECONCILE_TOPICS_MAX: Final = 10_000

# --- Replication and leadership (docs/adr/0005-replication-leadership.md). ------------------------
# Replicas in one group: each follower fetches from the leader, so the leader's read load grows
# with this; 5 survives two losses with a majority left, which is what operators run.
REPLICAS_MAX: Final = 5
# TTL of a leader's etcd lease. etcd refuses leases shorter than 1.5 x its election timeout
# (2 s with its defaults); 3 s lets a leader miss one keepalive, and a dead leader's group has a
# new one within ~TTL + REPLICA_OBSERVE_PERIOD_MS (under 10 s: the failover bound the replication
# tests hold).
REPLICA_LEASE_TTL_MS: Final = 3_000
# A leader stops acknowledging this long before its lease would expire by its own clock
# (measured from when it *sent* the grant or keepalive, so etcd's expiry is later still): the
# margin covers clock-rate drift and a keepalive answer that arrives late.
REPLICA_LEASE_SAFETY_MS: Final = 750
# A leader renews its lease this often: three tries inside one TTL.
REPLICA_KEEPALIVE_PERIOD_MS: Final = 1_000
# A follower reads its group's leader key this often (and campaigns once it is gone).
REPLICA_OBSERVE_PERIOD_MS: Final = 500
# A follower that has not reached the leader's end offset for this long leaves the in-sync set
# (Kafka's replica.lag.time.max.ms, shorter because our groups are local or on a LAN).
REPLICA_LAG_MAX_MS: Final = 2_000
# Deadline of one HTTP call to etcd's JSON gateway: a leader must notice an unreachable etcd
# well inside its lease (three keepalive periods). A replica keeps ETCD_IDLE_MAX idle connections.
ETCD_CALL_TIMEOUT_MS: Final = 1_000
ETCD_IDLE_MAX: Final = 4
# A local etcd started by `txmq cluster up` (or a test) must answer within this long.
ETCD_START_TIMEOUT_MS: Final = 15_000
# Bytes of one etcd gateway answer we read: a range of one key or a lease call is tiny.
ETCD_RESPONSE_SIZE_MAX: Final = 1 * MiB
# Keys one prefix read returns: every group's leader key of a cluster (one per group), or every
# replica registered in one group's replica list.
ETCD_PREFIX_KEYS_MAX: Final = CLUSTER_MEMBERS_MAX
# How often a replica of a cluster of several groups reads every group's leader from etcd (one
# range read), so its routes name another group's new leader within about this after etcd has it.
CLUSTER_LEADERS_PERIOD_MS: Final = 1_000
# A coordination call (etcd) that failed is tried again only after a delay: its bound doubles
# from COORDINATION_RETRY_FIRST_MS up to COORDINATION_RETRY_MAX_MS, and each delay is drawn from
# the upper half of its bound (jitter: replicas that failed together do not retry together). The
# first is short, so one lost call does not slow a failover; the last keeps a replica whose etcd
# is down near idle, and bounds how long after etcd returns the group leads again.
COORDINATION_RETRY_FIRST_MS: Final = 250
COORDINATION_RETRY_MAX_MS: Final = 2_000
# The same coordination error is logged at most once per this period, then with a count;
# counts are kept for this many distinct errors at once (a retry may fail in turns).
COORDINATION_LOG_PERIOD_MS: Final = 10_000
COORDINATION_LOG_TEXTS_MAX: Final = 8
# Bytes one follower fetch ships (whole batches, so a little more when a batch straddles it):
# large enough that a catching-up follower moves ~tens of MiB/s at a fetch per few ms, small
# enough to hold in memory once per follower.
REPLICA_FETCH_BYTES_MAX: Final = 1 * MiB
# Records scanned per fetch: more than any write batch (SEND_BATCH_MAX messages, a Spark sink
# bundle's commit of SINK_BUNDLE_MESSAGES_MAX), so a fetch ends on a batch boundary.
REPLICA_FETCH_RECORDS_MAX: Final = 16_384
# A follower's fetch at the leader's end waits this long for new records before it is answered
# empty (a long poll: a SYNC write is confirmed one round trip after it is written).
REPLICA_FETCH_WAIT_MS: Final = 200
# Wake-ups one such long poll takes before it is answered (each is a group written out or an
# ack; the REPLICA_FETCH_WAIT_MS deadline ends it first in practice).
REPLICA_FETCH_WAKES_MAX: Final = 10_000
# A leader answers a fetch on its event loop, without a thread hop (one hop costs more than
# the work, and each fetch would take two), when it ships at most this many bytes (a few page-
# cache reads) and publishes at most this many held records (a few queue-entry writes); a
# catching-up follower's larger fetches go to a thread.
REPLICA_INLINE_SHIP_BYTES: Final = 64 * KiB
REPLICA_INLINE_RECORDS_MAX: Final = 64
# A SYNC write not confirmed by min_insync_replicas within this long is answered with
# SLAVE_PERSISTENCE_TIMEOUT (stored on the leader, not acknowledged); longer than a follower
# needs to drop out of the in-sync set, so a dead follower costs one slow write, not a refusal.
REPLICA_ACK_TIMEOUT_MS: Final = 5_000
# A call with a deadline of its own (the official clients' sends and decisions carry 3 s) is
# refused this long before it (or a tenth of what is left, if more), so the caller reads the
# refusal and its message, not DEADLINE_EXCEEDED: time for the reply's way back, through a
# follower's forwarding hop too.
REPLICA_ACK_MARGIN_MS: Final = 250
# A waiting SYNC ack looks at the in-sync set again this often even when no fetch woke it (a
# follower may have left the set, which lowers what the ack waits for).
REPLICA_ACK_RECHECK_MS: Final = 500
# Each replica puts its own entry in its group's replica list in etcd and reads the list this
# often: routes carry every replica's address (ADR 0006), and a replica that starts or moves is
# advertised within a period. One etcd range per replica per period.
REPLICA_LIST_PERIOD_MS: Final = 1_000
# A follower forwards a client's data-plane call to its leader (broker/replication/forward.py);
# with no
# leader known yet (a failover under way) it waits this long for one before refusing with
# HA_NOT_AVAILABLE: a new leader is chosen within TTL + an observe period.
FORWARD_LEADER_WAIT_MS: Final = REPLICA_LEASE_TTL_MS + 2 * REPLICA_OBSERVE_PERIOD_MS
# A forwarded Telemetry stream (check-backs to a producer connected to a follower) is opened
# again to the new leader after a failover, this many times at most over its life; then it
# ends and the client opens a new one at its next settings sync.
FORWARD_STREAM_REOPENS_MAX: Final = 64
# Client commands buffered per forwarded Telemetry stream while its leader stream is reopened
# (settings and their answers: a handful; the client waits for nothing it sends there).
FORWARD_STREAM_BUFFER_MAX: Final = 32
# Metadata entries copied from a client's call to the leader's (auth headers, client id,
# language, version, namespace...: about ten); more is a malformed call.
FORWARD_METADATA_MAX: Final = 64
# A follower's forwarding channel to its leader gives up on an answer after this long when the
# client's call carries no deadline (the official clients always send one, 3 s by default).
FORWARD_CALL_TIMEOUT_MS: Final = 10_000
# A forwarded call's deadline is the client's less this margin, so that a follower whose leader
# does not answer can still tell the client so (HA_NOT_AVAILABLE naming the leader) before the
# client gives up; a local round trip takes far less.
FORWARD_DEADLINE_MARGIN_MS: Final = 200
# Forwarded calls open at once on one follower (each open Telemetry stream or receive long
# poll is one for its whole life; a client holds one Telemetry stream per broker): past it a
# call is refused with HA_NOT_AVAILABLE naming the leader instead of queueing without end.
FORWARD_CALLS_MAX: Final = 4_096
# A follower asks for the leader's topic definitions this often (they are not in the log).
REPLICA_TOPICS_PERIOD_MS: Final = 1_000
# (epoch, start offset) pairs a store's leader-epoch history keeps (store/replica/epochs.py):
# one per change of leader whose records the log holds. The oldest go first; a follower whose shared
# epoch was forgotten only truncates deeper (to the next shared one, or 0).
REPLICA_EPOCHS_MAX: Final = 1_024
# Random bytes of a replica store's incarnation id (store/replica/identity.py, hex in the file
# and in etcd's in-sync set): 128 bits, so two lives of a data directory never draw the same id.
REPLICA_INCARNATION_BYTES: Final = 16

# --- Dashboard. -----------------------------------------------------------------------------------
# Samples of each broker's metrics the dashboard keeps: at one sample per
# DASHBOARD_SAMPLE_PERIOD_MS, 180 samples are the last 6 minutes the overview charts show.
DASHBOARD_SAMPLES_MAX: Final = 180
DASHBOARD_SAMPLE_PERIOD_MS: Final = 2_000
# --sample-ms range: faster than 200 ms is load on the broker for nothing a person can see;
# slower than a minute leaves the ring's charts hours long and mostly stale.
DASHBOARD_SAMPLE_PERIOD_MS_MIN: Final = 200
DASHBOARD_SAMPLE_PERIOD_MS_MAX: Final = 60_000
# One admin call from the dashboard; a broker slower than this shows as down on that sample.
DASHBOARD_CALL_TIMEOUT_MS: Final = 5_000
# Bytes of a body the dashboard renders (text, JSON or hex); the rest is cut with a note.
DASHBOARD_BODY_BYTES_MAX: Final = 64 * KiB
# Signed-in browser sessions holding admin credentials in a dashboard process; a sign-in beyond
# this is refused (never a live session pushed out), so repeated sign-ins cannot grow its memory.
DASHBOARD_SESSIONS_MAX: Final = 1_000
# Rows of a paged listing (topics, groups, transactions) on one dashboard page; "next page"
# follows the broker's cursor.
DASHBOARD_PAGE_ROWS_MAX: Final = 200
# Cluster members one dashboard watches (given with --endpoints or found through ClusterInfo);
# each costs an admin call per sample period and a ring of samples.
DASHBOARD_MEMBERS_MAX: Final = 64
# Signed-in sessions one client address may hold: a person with a few browsers fits, one
# local account cannot fill the whole table.
DASHBOARD_SESSIONS_PER_ADDRESS_MAX: Final = 32
# Anonymous sessions (visitors holding only form tokens); the oldest is dropped when full.
DASHBOARD_ANONYMOUS_SESSIONS_MAX: Final = 4096
# Form tokens one session holds (pages opened and not yet submitted); the oldest go first.
DASHBOARD_TOKENS_PER_SESSION_MAX: Final = 64
# Sign-in attempts per client address per window (sessions.SIGN_IN_WINDOW_S).
DASHBOARD_SIGN_IN_ATTEMPTS_MAX: Final = 10
# Client addresses whose sign-in attempts are counted; new ones are refused when full.
DASHBOARD_SIGN_IN_ADDRESSES_MAX: Final = 4096
# --form-ttl-s at most: a confirmation older than an hour is not one a person just read.
DASHBOARD_FORM_TTL_S_MAX: Final = 3600.0

# --- Demo. ----------------------------------------------------------------------------------------
# Asking the broker for each missing order's DLQ copy costs one call per order: the demo's settle
# loop asks only once at most this many orders are missing.
DEMO_DLQ_PROBE_MAX: Final = 25
# Ids listed per mismatch kind in the reconciliation report (the counts are always complete).
DEMO_REPORT_IDS_MAX: Final = 1000

# --- txmq audit (txmq/audit/). --------------------------------------------------------------------
# Examples of each kind of discrepancy brought to the driver and printed (the counts are always
# complete; the report's Parquet files hold every discrepancy): a page a person reads, and the
# one thing besides counts that crosses from the executors to the driver.
AUDIT_EXAMPLES_DEFAULT: Final = 20
AUDIT_EXAMPLES_MAX: Final = 1_000
# Time buckets of the per-minute series: a day of minutes; a longer span gets wider buckets
# (a whole number of minutes each), so the driver holds at most this many rows per stream.
AUDIT_BUCKETS_MAX: Final = 1_440
# Open transactions the audit keeps (and whose half message it fetches to learn its key: one
# admin call each), oldest first on each broker; the counts of undecided and dead transactions
# are always complete.
AUDIT_TXN_LOOKUPS_MAX: Final = 200
# How far outside the window a row's message (or a message's row) is still looked for: a
# message is stored after its row's local transaction commits, up to the broker's check-back
# (RocketMQ's default: 15 checks 30 s apart, so 7.5 minutes) later.
AUDIT_GRACE_MS_DEFAULT: Final = 10 * 60_000
# Rows the JDBC driver fetches per round trip: what bounds a read's memory (PostgreSQL's driver
# otherwise holds a whole result set).
AUDIT_JDBC_FETCH_ROWS: Final = 10_000
# Partitions of a windowed table read (split on the time column); a whole-table read is one.
AUDIT_JDBC_PARTITIONS_DEFAULT: Final = 4
AUDIT_JDBC_PARTITIONS_MAX: Final = 1_024

# --- Checks between limits. -----------------------------------------------------------------------
# Import-time checks on relationships between limits.
assert list(SETTINGS_REPEAT_DELAYS_MS) == sorted(SETTINGS_REPEAT_DELAYS_MS)
assert SEGMENT_SIZE_MIN <= SEGMENT_SIZE_DEFAULT <= SEGMENT_SIZE_MAX
assert BODY_SIZE_MAX_DEFAULT <= BODY_SIZE_MAX_LIMIT < RECORD_SIZE_MAX
assert TRANSACTION_TIMEOUT_MS_DEFAULT < TRANSACTION_CHECK_INTERVAL_MS_DEFAULT
assert TRANSACTION_CHECK_INTERVAL_MS_DEFAULT <= TRANSACTION_CHECK_INTERVAL_MS_MAX
assert READ_BATCH_MAX <= READ_SCAN_ENTRIES_MAX
# A re-drive's batch (its copies and its position record) is shipped to replicas whole.
assert REDRIVE_BATCH_MAX + 1 < REPLICA_FETCH_RECORDS_MAX
assert RECEIVE_BATCH_MAX <= READ_FILTER_RECORDS_MAX <= READ_SCAN_ENTRIES_MAX
assert RECEIVE_BATCH_MAX <= READ_BATCH_MAX
assert BODY_SIZE_MAX_DEFAULT < RECEIVE_STREAM_BYTES_MAX < RECEIVE_BYTES_HELD_MAX
assert 0.0 < DISK_WATERMARK_DEFAULT < 1.0
assert GRPC_MESSAGE_SIZE_MAX > BODY_SIZE_MAX_LIMIT
assert PULL_BYTES_MAX + PULL_HEADER_SIZE_MAX <= GRPC_MESSAGE_SIZE_MAX
assert RECORD_SIZE_MAX + PULL_HEADER_SIZE_MAX <= GRPC_MESSAGE_SIZE_MAX
assert LEDGER_RECORDS_PER_KEY_MAX <= FIND_BY_KEY_RESULTS_MAX
assert TRANSACTION_CHECK_MAX_DEFAULT <= TRANSACTION_CHECK_MAX_LIMIT
assert DELIVERY_ATTEMPTS_MAX_DEFAULT <= DELIVERY_ATTEMPTS_MAX_LIMIT
assert TRANSACTION_CHECK_INTERVAL_MS_MIN <= TRANSACTION_CHECK_INTERVAL_MS_DEFAULT
assert TRANSACTIONS_DEAD_MAX <= TRANSACTIONS_PENDING_MAX
assert DASHBOARD_CALL_TIMEOUT_MS > DASHBOARD_SAMPLE_PERIOD_MS
assert (
    DASHBOARD_SAMPLE_PERIOD_MS_MIN <= DASHBOARD_SAMPLE_PERIOD_MS <= DASHBOARD_SAMPLE_PERIOD_MS_MAX
)
assert DASHBOARD_PAGE_ROWS_MAX <= ADMIN_PAGE_ROWS_MAX
assert SECRET_KEY_LENGTH_MIN <= SECRET_KEY_LENGTH_MAX
assert ACCESS_KEY_LENGTH_MAX + 2 * 40 < AUTH_HEADER_LENGTH_MAX
assert 0 < AUTH_DATE_SKEW_S_DEFAULT < AUTH_DATE_SKEW_S_MAX
assert 0 < AUTH_CLIENT_IDS_PER_KEY_MAX < AUTH_CLIENT_IDS_MAX
assert CLUSTER_PEER_CALL_TIMEOUT_MS < CLUSTER_PROBE_PERIOD_MS
assert SINK_BUNDLE_BYTES_MAX <= BODY_SIZE_MAX_DEFAULT
assert SINK_BUNDLE_MESSAGES_MAX < 65536
assert REPLICA_LEASE_SAFETY_MS + 2 * REPLICA_KEEPALIVE_PERIOD_MS <= REPLICA_LEASE_TTL_MS
assert ETCD_CALL_TIMEOUT_MS <= REPLICA_KEEPALIVE_PERIOD_MS
assert REPLICA_OBSERVE_PERIOD_MS < REPLICA_LEASE_TTL_MS
assert COORDINATION_RETRY_FIRST_MS <= REPLICA_OBSERVE_PERIOD_MS <= COORDINATION_RETRY_MAX_MS
assert max(SEND_BATCH_MAX, SINK_BUNDLE_MESSAGES_MAX) < REPLICA_FETCH_RECORDS_MAX
assert REPLICA_LAG_MAX_MS < REPLICA_ACK_TIMEOUT_MS
assert REPLICA_FETCH_WAIT_MS < ETCD_CALL_TIMEOUT_MS
assert AUDIT_TXN_LOOKUPS_MAX <= AUDIT_EXAMPLES_MAX
assert AUDIT_EXAMPLES_DEFAULT <= AUDIT_EXAMPLES_MAX
