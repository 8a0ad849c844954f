-- Chronos relay on PostgreSQL, migration 2: the records around the queue.

-- Small shared facts: the epoch marker ('epoch') and the report of a lost
-- store ('lost': "<since ms> <until ms> <gone|replaced>").
CREATE TABLE chronos_meta (
	name  text PRIMARY KEY,
	value text NOT NULL
);

-- chronos_check_epoch checks the epoch marker for a caller that knows
-- marker known ('' before its first check): a marker gone is written anew
-- (fresh) and, when the caller knew one, the loss is reported for report_ms;
-- a marker other than the known one is reported as replaced unless a loss
-- is reported already. It returns the marker in force, the engine's time
-- and the report in force, if any.
CREATE FUNCTION chronos_check_epoch(known text, fresh text, report_ms bigint, now_override bigint)
RETURNS TABLE (marker text, now_ms bigint, lost text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t        bigint := chronos_now_ms(now_override);
	cur      text;
	inserted boolean;
BEGIN
	-- The update that changes nothing locks the marker and returns it; an
	-- insert means it was gone.
	INSERT INTO chronos_meta AS m (name, value) VALUES ('epoch', fresh)
	ON CONFLICT (name) DO UPDATE SET value = m.value
	RETURNING m.value, (xmax = 0) INTO cur, inserted;
	IF inserted AND known <> '' THEN
		INSERT INTO chronos_meta AS m (name, value) VALUES ('lost', t || ' ' || (t + report_ms) || ' gone')
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
	ELSIF NOT inserted AND known <> '' AND cur <> known THEN
		INSERT INTO chronos_meta AS m (name, value) VALUES ('lost', t || ' ' || (t + report_ms) || ' replaced')
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
		WHERE split_part(m.value, ' ', 2)::bigint <= t;
	END IF;
	RETURN QUERY SELECT cur, t, (SELECT value FROM chronos_meta
		WHERE name = 'lost' AND split_part(value, ' ', 2)::bigint > t);
END
$$;

-- Agent instances: the operator's stop and start, the callback URL.
-- Claims read stopped by instance_id.
CREATE TABLE chronos_instances (
	instance_id  text    PRIMARY KEY,
	stopped      boolean NOT NULL DEFAULT false,
	stopped_ns   bigint  NOT NULL DEFAULT 0,
	started_ns   bigint  NOT NULL DEFAULT 0,
	callback_url text    NOT NULL DEFAULT ''
);
CREATE INDEX chronos_instances_stopped ON chronos_instances (instance_id) WHERE stopped;

-- First-delivery records of delivery ids, until they expire (expires_ms
-- <= now: expired, as if never recorded).
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

-- Direct delivery's rekey floors (whole milliseconds, in ns).
CREATE TABLE chronos_rekey (
	agent_id text   PRIMARY KEY,
	floor_ns bigint NOT NULL
);

-- Delivery history: counted minutes, each agent's recent deliveries, and
-- the processes' beats.

-- counts is a flat object of counters: "o:<outcome>", "r" (retries),
-- "l:<lag bucket>".
CREATE TABLE chronos_history_minutes (
	minute_ms bigint PRIMARY KEY,
	counts    jsonb  NOT NULL
);

-- chronos_counts_add adds two objects of counters key by key.
CREATE FUNCTION chronos_counts_add(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
	SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb)
	FROM (SELECT k, sum(v::bigint) AS n
	      FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) x(k, v)
	      GROUP BY k) y
$$;

CREATE TABLE chronos_recent_deliveries (
	agent_id text   NOT NULL,
	seq      bigint NOT NULL DEFAULT nextval('chronos_arm_seq'),
	at_ms    bigint NOT NULL, -- the record's At
	record   jsonb  NOT NULL,
	PRIMARY KEY (agent_id, seq)
);
CREATE INDEX chronos_recent_deliveries_at ON chronos_recent_deliveries (at_ms);

CREATE TABLE chronos_beats (
	id      text   PRIMARY KEY,
	kind    text   NOT NULL,
	beat_ns bigint NOT NULL,
	beat    jsonb  NOT NULL
);
