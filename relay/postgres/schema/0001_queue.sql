-- Chronos relay on PostgreSQL, migration 1: the queue.
-- Every table lives in the engine's schema (search_path); times are Unix
-- milliseconds (bigint) judged by chronos_now_ms, fire_at in nanoseconds.

-- chronos_now_ms is the engine's clock: the server's, unless a test passes
-- its own time.
CREATE FUNCTION chronos_now_ms(override bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
	SELECT coalesce(override, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- Fencing tokens are never reused; arm order breaks ties between equal due
-- times.
CREATE SEQUENCE chronos_token_seq;
CREATE SEQUENCE chronos_arm_seq;

-- One row per armed one-shot of (agent_id, job_id): its armed row, due
-- entry and lease in one record.
CREATE TABLE chronos_fires (
	agent_id         text     NOT NULL,
	job_id           text     NOT NULL,
	schedule_id      text     NOT NULL UNIQUE,
	instance_id      text     NOT NULL DEFAULT '',
	fire_at_ns       bigint   NOT NULL,           -- exact fire_at, Unix ns
	fire_at_spelling text     NOT NULL DEFAULT '',
	callback_url     text     NOT NULL DEFAULT '',
	flex_ms          bigint   NOT NULL DEFAULT 0,
	attempt          integer  NOT NULL DEFAULT 0,
	-- state: 0 queued (armed, claimable when due), 1 held (armed, held
	-- back by flow control), 2 leased.
	state            smallint NOT NULL DEFAULT 0,
	due_ms           bigint   NOT NULL,
	tie              integer  NOT NULL DEFAULT 0, -- the agent's k-th fire due in due_ms
	seq              bigint   NOT NULL DEFAULT nextval('chronos_arm_seq'),
	token            bigint   NOT NULL DEFAULT 0, -- fencing token of the lease, 0 when armed
	lease_until_ms   bigint   NOT NULL DEFAULT 0,
	created_ms       bigint   NOT NULL,
	last_error       text     NOT NULL DEFAULT '',
	direct_sealed    text     NOT NULL DEFAULT '',
	direct_kid       text     NOT NULL DEFAULT '',
	direct_minted_ns bigint   NOT NULL DEFAULT 0,
	PRIMARY KEY (agent_id, job_id)
);
CREATE INDEX chronos_fires_due   ON chronos_fires (due_ms, tie, seq) WHERE state = 0;
CREATE INDEX chronos_fires_held  ON chronos_fires (agent_id, due_ms, tie, seq) WHERE state = 1;
CREATE INDEX chronos_fires_lease ON chronos_fires (lease_until_ms) WHERE state = 2;
CREATE INDEX chronos_fires_inflight ON chronos_fires (agent_id, lease_until_ms) WHERE state = 2;
CREATE INDEX chronos_fires_flex  ON chronos_fires (agent_id, fire_at_ns) WHERE flex_ms > 0 AND state <> 2;

-- One row per agent the queue has seen: its flow control policy and state.
-- Claims lock an agent's row while they decide its fires.
CREATE TABLE chronos_agents (
	agent_id    text             PRIMARY KEY,
	has_policy  boolean          NOT NULL DEFAULT false,
	parallelism integer          NOT NULL DEFAULT 0,
	rate        double precision NOT NULL DEFAULT 0,
	disabled    boolean          NOT NULL DEFAULT false,
	has_held    boolean          NOT NULL DEFAULT false, -- some fire may be held (cleared lazily)
	gate_ms     bigint           NOT NULL DEFAULT 0,     -- a Down delivery's hold
	tat_ms      bigint           NOT NULL DEFAULT 0,     -- the rate's next slot
	probing     boolean          NOT NULL DEFAULT false,
	failures    integer          NOT NULL DEFAULT 0,
	phase_n     bigint           NOT NULL DEFAULT 0,     -- spreading phase index, 0: none yet
	tie_ms      bigint           NOT NULL DEFAULT 0,     -- last due ms armed, and how many in it
	tie_n       integer          NOT NULL DEFAULT 0
);
CREATE INDEX chronos_agents_held ON chronos_agents (agent_id) WHERE has_held;
CREATE SEQUENCE chronos_phase_seq;

-- The dead letter: fires the relay gave up on, in kill order.
CREATE TABLE chronos_dead (
	schedule_id      text     PRIMARY KEY,
	agent_id         text     NOT NULL,
	job_id           text     NOT NULL,
	instance_id      text     NOT NULL DEFAULT '',
	fire_at_ns       bigint   NOT NULL,
	fire_at_spelling text     NOT NULL DEFAULT '',
	callback_url     text     NOT NULL DEFAULT '',
	flex_ms          bigint   NOT NULL DEFAULT 0,
	attempt          integer  NOT NULL DEFAULT 0,
	created_ms       bigint   NOT NULL,
	last_error       text     NOT NULL DEFAULT '',
	direct_sealed    text     NOT NULL DEFAULT '',
	direct_kid       text     NOT NULL DEFAULT '',
	direct_minted_ns bigint   NOT NULL DEFAULT 0,
	reason           text     NOT NULL DEFAULT '',
	failed_ms        bigint   NOT NULL,
	seq              bigint   NOT NULL DEFAULT nextval('chronos_arm_seq'),
	in_feed          boolean  NOT NULL DEFAULT true -- in the agent's failed-fire feed, not acknowledged
);
CREATE INDEX chronos_dead_order ON chronos_dead (seq);
CREATE INDEX chronos_dead_agent ON chronos_dead (agent_id, seq);
CREATE INDEX chronos_dead_job   ON chronos_dead (agent_id, job_id);
CREATE INDEX chronos_dead_feed  ON chronos_dead (agent_id, failed_ms, seq) WHERE in_feed;
