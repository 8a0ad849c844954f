-- Chronos relay on PostgreSQL, migration 2: the records around the queue.

-- Small shared facts: the epoch marker, the report of a lost store.
CREATE TABLE chronos_meta (
	name  text PRIMARY KEY,
	value text NOT NULL
);

-- Agent instances: the operator's stop and start, the callback URL.
CREATE TABLE chronos_instances (
	instance_id  text    PRIMARY KEY,
	stopped      boolean NOT NULL DEFAULT false,
	stopped_ns   bigint  NOT NULL DEFAULT 0,
	started_ns   bigint  NOT NULL DEFAULT 0,
	callback_url text    NOT NULL DEFAULT ''
);
CREATE INDEX chronos_instances_stopped ON chronos_instances (instance_id) WHERE stopped;

-- First-delivery records of delivery ids, until they expire.
CREATE TABLE chronos_deliveries (
	delivery_id text   PRIMARY KEY,
	expires_ms  bigint NOT NULL
);
CREATE INDEX chronos_deliveries_expiry ON chronos_deliveries (expires_ms);

-- Each job's last fire outcome until the job is armed again.
CREATE TABLE chronos_last_fires (
	agent_id     text    NOT NULL,
	job_id       text    NOT NULL,
	instance_id  text    NOT NULL DEFAULT '',
	schedule_id  text    NOT NULL,
	fire_at_ns   bigint  NOT NULL,
	callback_url text    NOT NULL DEFAULT '',
	outcome      text    NOT NULL,
	reason       text    NOT NULL DEFAULT '',
	at_ns        bigint  NOT NULL,
	reported     boolean NOT NULL DEFAULT false,
	PRIMARY KEY (agent_id, job_id)
);
CREATE INDEX chronos_last_fires_at ON chronos_last_fires (at_ns);

-- Direct delivery's rekey floors.
CREATE TABLE chronos_rekey (
	agent_id text   PRIMARY KEY,
	floor_ns bigint NOT NULL
);

-- Delivery history: counted minutes, each agent's recent deliveries, and
-- the processes' beats.
CREATE TABLE chronos_history_minutes (
	minute_ms bigint PRIMARY KEY,
	counts    jsonb  NOT NULL
);
CREATE TABLE chronos_recent_deliveries (
	agent_id text   NOT NULL,
	seq      bigint NOT NULL DEFAULT nextval('chronos_arm_seq'),
	record   jsonb  NOT NULL,
	PRIMARY KEY (agent_id, seq)
);
CREATE TABLE chronos_beats (
	id      text   PRIMARY KEY,
	kind    text   NOT NULL,
	beat_ms bigint NOT NULL,
	beat    jsonb  NOT NULL
);
