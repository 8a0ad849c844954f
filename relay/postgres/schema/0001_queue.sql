-- Chronos relay on PostgreSQL, migration 1: the queue.
-- Every table lives in the engine's schema (search_path); times are Unix
-- milliseconds (bigint) judged by chronos_now_ms, fire_at in nanoseconds.
--
-- Every transition of a fire is one statement: a function below (one round
-- trip, one transaction), each taking the engine's clock override and, when
-- it may announce a wake-up, the schema's NOTIFY channel.
--
-- Locks: an arm takes its agent's tie row (chronos_ties), then the fire's
-- row; any other transition that waits for a lock takes fire rows first
-- and then their agents' rows in chronos_agents, in agent id order; a claim never waits (FOR UPDATE SKIP
-- LOCKED on fires and agents), so it takes part in no deadlock.

-- chronos_now_ms is the engine's clock: the server's, unless a test passes
-- its own time.
CREATE FUNCTION chronos_now_ms(override bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
	SELECT coalesce(override, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- chronos_wake announces a wake-up on channel (at commit) and returns true.
CREATE FUNCTION chronos_wake(channel text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	PERFORM pg_notify(channel, '');
	RETURN true;
END
$$;

-- Fencing tokens are never reused; arm order breaks ties between equal due
-- times.
CREATE SEQUENCE chronos_token_seq;
CREATE SEQUENCE chronos_arm_seq;

-- One row per armed one-shot of (agent_id, job_id): its armed row, due
-- entry and lease in one record.
CREATE TABLE chronos_fires (
	agent_id         text     COLLATE "C" NOT NULL,
	job_id           text     COLLATE "C" NOT NULL,
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
)
-- A queue: every fire is written a few times and deleted; claims read the
-- head of chronos_fires_due, where the entries of fires leased before stay
-- until a vacuum, so autovacuum comes early.
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX chronos_fires_due   ON chronos_fires (due_ms, tie, seq) WHERE state = 0;
CREATE INDEX chronos_fires_held  ON chronos_fires (agent_id, due_ms, tie, seq) WHERE state = 1;
CREATE INDEX chronos_fires_lease ON chronos_fires (lease_until_ms) WHERE state = 2;
CREATE INDEX chronos_fires_inflight ON chronos_fires (agent_id, lease_until_ms) WHERE state = 2;
CREATE INDEX chronos_fires_flex  ON chronos_fires (agent_id, fire_at_ns) WHERE flex_ms > 0 AND state <> 2;

-- One row per agent the queue has seen (made by its first arm, never
-- removed): its flow control policy and state. Claims lock an agent's row
-- while they decide its fires.
CREATE TABLE chronos_agents (
	agent_id    text             COLLATE "C" PRIMARY KEY,
	has_policy  boolean          NOT NULL DEFAULT false,
	parallelism integer          NOT NULL DEFAULT 0,
	rate        double precision NOT NULL DEFAULT 0,
	disabled    boolean          NOT NULL DEFAULT false,
	has_held    boolean          NOT NULL DEFAULT false, -- some fire may be held (cleared lazily)
	ep          integer          NOT NULL DEFAULT 0,     -- parallelism applied by the claim that held (0: none)
	gate_ms     bigint           NOT NULL DEFAULT 0,     -- a Down delivery's hold
	tat_ms      double precision NOT NULL DEFAULT 0,     -- the rate's next slot (GCRA, no burst)
	probing     boolean          NOT NULL DEFAULT false,
	failures    integer          NOT NULL DEFAULT 0,
	phase_n     bigint           NOT NULL DEFAULT 0      -- spreading phase index, 0: none yet
);
CREATE INDEX chronos_agents_held ON chronos_agents (agent_id) WHERE has_held;
CREATE SEQUENCE chronos_phase_seq;

-- One row per agent that armed: the last due ms it armed a fire for and how
-- many it armed due in it (a fire's tie). Arms lock it (their quota is
-- checked under it), so arms of one agent take their turns without ever
-- waiting for a claim, which locks the agent's row in chronos_agents.
CREATE TABLE chronos_ties (
	agent_id text    COLLATE "C" PRIMARY KEY,
	tie_ms   bigint  NOT NULL DEFAULT 0,
	tie_n    integer NOT NULL DEFAULT 0
);

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

-- chronos_arm upserts the one-shot of (agent, job) (relay.Armed.Arm): the
-- same fire_at and window again keeps the row and its schedule id, only
-- following a new callback URL, instance or spelling and the cron key
-- relay.ArmKey picks (p_keep_ns: keep a held key minted at or after it);
-- another replaces the row under p_sid, due at p_due_ms, its lease lost.
-- A new row counts against p_quota (0: none), checked under the agent's
-- tie row's lock (chronos_ties), which also counts the agent's fires armed
-- due in the same millisecond (the row's tie: fires due together come up
-- round the agents). It announces a wake-up when the fire is due before every queued
-- one, or when it ended a lease of an agent with held fires.
--
-- Returns one row: status (1 the fire changed, plus 2 when the row's cron
-- key or delivery mode changed; -1 over quota, nothing written), the
-- schedule id replaced (''), whether it announced a wake-up, and the row.
CREATE FUNCTION chronos_arm(p_now bigint, p_channel text, p_agent text, p_job text, p_sid text,
	p_instance text, p_fire_ns bigint, p_spelling text, p_callback text, p_flex_ms bigint,
	p_due_ms bigint, p_quota integer, p_sealed text, p_kid text, p_minted_ns bigint, p_keep_ns bigint)
RETURNS TABLE (o_status integer, o_replaced text, o_woke boolean,
	o_agent_id text, o_job_id text, o_schedule_id text, o_instance_id text, o_fire_at_ns bigint,
	o_fire_at_spelling text, o_callback_url text, o_flex_ms bigint, o_attempt integer, o_state smallint,
	o_due_ms bigint, o_token bigint, o_lease_until_ms bigint, o_created_ms bigint, o_last_error text,
	o_direct_sealed text, o_direct_kid text, o_direct_minted_ns bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t        bigint := chronos_now_ms(p_now);
	old      chronos_fires%ROWTYPE;
	had      boolean;
	k_sealed text := p_sealed;
	k_kid    text := p_kid;
	k_minted bigint := p_minted_ns;
	rekey    integer := 0;
	v_tie    integer;
	v_tie_ms bigint;
	v_held   boolean;
	v_min    bigint;
	v_woke   boolean := false;
	n        integer;
BEGIN
	-- The agent's tie row first (made by its first arm), locked: arms of
	-- one agent take their turns, and its quota and ties are counted under
	-- it. Then the fire's row.
	INSERT INTO chronos_ties AS a (agent_id) VALUES (p_agent)
	ON CONFLICT (agent_id) DO UPDATE SET tie_n = a.tie_n
	RETURNING a.tie_ms, a.tie_n INTO v_tie_ms, v_tie;
	SELECT * INTO old FROM chronos_fires f WHERE f.agent_id = p_agent AND f.job_id = p_job FOR UPDATE;
	had := FOUND;
	IF had THEN
		-- relay.ArmKey
		IF p_sealed = '' THEN
			k_sealed := ''; k_kid := ''; k_minted := 0;
			IF old.direct_sealed <> '' THEN rekey := 2; END IF;
		ELSIF old.direct_sealed <> '' AND old.direct_minted_ns >= p_keep_ns THEN
			k_sealed := old.direct_sealed; k_kid := old.direct_kid; k_minted := old.direct_minted_ns;
		ELSE
			rekey := 2;
		END IF;
		IF old.fire_at_ns = p_fire_ns AND old.flex_ms = p_flex_ms THEN
			-- The same fire: keep its schedule id, follow the agent.
			IF (p_callback <> '' AND old.callback_url <> p_callback)
				OR (p_instance <> '' AND old.instance_id <> p_instance)
				OR old.fire_at_spelling <> p_spelling OR rekey > 0 THEN
				IF p_callback <> '' THEN old.callback_url := p_callback; END IF;
				IF p_instance <> '' THEN old.instance_id := p_instance; END IF;
				old.fire_at_spelling := p_spelling;
				old.direct_sealed := k_sealed; old.direct_kid := k_kid; old.direct_minted_ns := k_minted;
				UPDATE chronos_fires f SET callback_url = old.callback_url, instance_id = old.instance_id,
					fire_at_spelling = old.fire_at_spelling, direct_sealed = old.direct_sealed,
					direct_kid = old.direct_kid, direct_minted_ns = old.direct_minted_ns
				WHERE f.agent_id = p_agent AND f.job_id = p_job;
			END IF;
			RETURN QUERY SELECT rekey, ''::text, false, old.agent_id, old.job_id, old.schedule_id,
				old.instance_id, old.fire_at_ns, old.fire_at_spelling, old.callback_url, old.flex_ms,
				old.attempt, old.state, old.due_ms, old.token, old.lease_until_ms, old.created_ms,
				old.last_error, old.direct_sealed, old.direct_kid, old.direct_minted_ns;
			RETURN;
		END IF;
	END IF;
	v_tie := CASE WHEN v_tie_ms = p_due_ms THEN v_tie + 1 ELSE 0 END;
	UPDATE chronos_ties a SET tie_ms = p_due_ms, tie_n = v_tie WHERE a.agent_id = p_agent;
	IF NOT had AND p_quota > 0 THEN
		SELECT count(*) INTO n FROM (SELECT 1 FROM chronos_fires f WHERE f.agent_id = p_agent LIMIT p_quota) q;
		IF n >= p_quota THEN
			-- Over quota: the tie counted above stays, harmless.
			RETURN QUERY SELECT -1, ''::text, false, p_agent, p_job, ''::text, ''::text, 0::bigint, ''::text,
				''::text, 0::bigint, 0, 0::smallint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, ''::text,
				''::text, ''::text, 0::bigint;
			RETURN;
		END IF;
	END IF;
	-- The earliest queued fire: the head of chronos_fires_due, however
	-- stale the table's statistics (no aggregate over the table).
	SELECT f.due_ms INTO v_min FROM chronos_fires f WHERE f.state = 0 ORDER BY f.due_ms LIMIT 1;
	-- The agent's row, made on its first arm (a new tie row: its tie_ms is
	-- 0), never waiting for a claim that holds it.
	IF v_tie_ms = 0 THEN
		INSERT INTO chronos_agents (agent_id) VALUES (p_agent) ON CONFLICT DO NOTHING;
	END IF;
	v_held := false;
	IF had AND old.state = 2 THEN
		SELECT a.has_held INTO v_held FROM chronos_agents a WHERE a.agent_id = p_agent;
	END IF;
	-- Due already, or before every queued fire: dispatchers may be waiting
	-- for a later time, or for nothing (the head read here may be a fire a
	-- claim is taking at this moment).
	v_woke := p_due_ms <= t OR v_min IS NULL OR p_due_ms < v_min OR coalesce(v_held, false);
	IF had THEN
		UPDATE chronos_fires f SET schedule_id = p_sid, instance_id = p_instance, fire_at_ns = p_fire_ns,
			fire_at_spelling = p_spelling, callback_url = p_callback, flex_ms = p_flex_ms, attempt = 0,
			state = 0, due_ms = p_due_ms, tie = least(v_tie, 1022), seq = nextval('chronos_arm_seq'),
			token = 0, lease_until_ms = 0, created_ms = t, last_error = '',
			direct_sealed = k_sealed, direct_kid = k_kid, direct_minted_ns = k_minted
		WHERE f.agent_id = p_agent AND f.job_id = p_job;
	ELSE
		INSERT INTO chronos_fires (agent_id, job_id, schedule_id, instance_id, fire_at_ns, fire_at_spelling,
			callback_url, flex_ms, due_ms, tie, created_ms, direct_sealed, direct_kid, direct_minted_ns)
		VALUES (p_agent, p_job, p_sid, p_instance, p_fire_ns, p_spelling, p_callback, p_flex_ms, p_due_ms,
			least(v_tie, 1022), t, k_sealed, k_kid, k_minted);
	END IF;
	IF v_woke THEN PERFORM pg_notify(p_channel, ''); END IF;
	RETURN QUERY SELECT 1 + rekey, CASE WHEN had THEN old.schedule_id ELSE '' END, v_woke,
		p_agent, p_job, p_sid, p_instance, p_fire_ns, p_spelling, p_callback, p_flex_ms, 0, 0::smallint,
		p_due_ms, 0::bigint, 0::bigint, t, ''::text, k_sealed, k_kid, k_minted;
END
$$;

-- chronos_claim leases up to p_max due fires for p_lease_ms under flow
-- control (relay.Flow: p_par and p_rate are the claim's defaults), in one
-- transaction that never waits for a lock:
--
--  1. agents with held fires whose gate has passed and that seem to have
--     room (has_held; locked FOR UPDATE SKIP LOCKED, their leases in
--     flight counted under the lock) get their held fires, oldest first,
--     as far as their room allows; an agent found to hold none any more
--     has its flag cleared;
--  2. due queued fires, in due order (due_ms, tie, seq), a page at a time
--     (FOR UPDATE SKIP LOCKED): the agents met are locked (SKIP LOCKED: a
--     fire of an agent another transaction holds stays queued for the next
--     claim) and read once; an agent with held fires gets them first; a
--     fire of an agent without room, or still holding fires, is held
--     (state 1); the others are leased, never more of one agent than its
--     room;
--  3. the agents that got a lease have their queued fires whose flexible
--     window has opened made due now.
--
-- An agent's room: none while disabled or before its gate (a Down
-- delivery's hold, its rate's next slot); 1 less its leases in flight while
-- probing; its parallelism less its leases in flight; unbounded without a
-- parallelism. A lease under a rate moves the rate's slot past now.
--
-- Returns the leases in the order taken: the agent's failure count, whether
-- the fire's instance is stopped, and the row.
CREATE FUNCTION chronos_claim(p_now bigint, p_max integer, p_lease_ms bigint, p_par integer,
	p_rate double precision)
RETURNS TABLE (o_failures integer, o_stopped boolean,
	o_agent_id text, o_job_id text, o_schedule_id text, o_instance_id text, o_fire_at_ns bigint,
	o_fire_at_spelling text, o_callback_url text, o_flex_ms bigint, o_attempt integer, o_state smallint,
	o_due_ms bigint, o_token bigint, o_lease_until_ms bigint, o_created_ms bigint, o_last_error text,
	o_direct_sealed text, o_direct_kid text, o_direct_minted_ns bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t        bigint := chronos_now_ms(p_now);
	-- The agents met, by index: id, room (-1: unbounded), rate, rate slot,
	-- holds fires (as far as known), held fires as read, slot moved,
	-- locked by this claim, held fires served, parallelism as read and as
	-- applied (probing aside).
	a_id     text[] := '{}';
	a_room   integer[] := '{}';
	a_rate   double precision[] := '{}';
	a_tat    double precision[] := '{}';
	a_held   boolean[] := '{}';
	a_was    boolean[] := '{}';
	a_moved  boolean[] := '{}';
	a_mine   boolean[] := '{}';
	a_served boolean[] := '{}';
	a_ep     integer[] := '{}';
	a_par    integer[] := '{}';
	-- The leases and holds decided, in order.
	l_agent  text[] := '{}';
	l_job    text[] := '{}';
	h_agent  text[] := '{}';
	h_job    text[] := '{}';
	taken    integer := 0;
	ag       record;
	j        integer;
	k        integer;
	n        integer;
	par      integer;
	inflight integer;
	got      text[];
	fresh    text[];
	x        text;
	page     integer := least(greatest(p_max * 2, 32), 1000);
	peeked   integer := 0;
	c_agent  text[];
	c_job    text[];
	c        record;
	last_due bigint;
	last_tie integer;
	last_seq bigint;
	u_id     text[] := '{}';
	u_held   boolean[] := '{}';
	u_tat    double precision[] := '{}';
	u_ep     integer[] := '{}';
BEGIN
	IF p_max <= 0 THEN
		RETURN;
	END IF;
	-- 1. Agents with held fires and, as it seems, room for them.
	FOR ag IN
		SELECT a.agent_id, a.parallelism, a.rate, a.disabled, a.probing, a.gate_ms, a.tat_ms, a.has_held, a.ep
		FROM chronos_agents a
		WHERE a.has_held AND NOT a.disabled AND a.gate_ms <= t AND a.tat_ms <= t
			AND (CASE WHEN a.probing THEN 1 ELSE coalesce(nullif(a.parallelism, 0), p_par) END <= 0
				OR (SELECT count(*) FROM chronos_fires f
					WHERE f.agent_id = a.agent_id AND f.state = 2 AND f.lease_until_ms > t)
					< CASE WHEN a.probing THEN 1 ELSE coalesce(nullif(a.parallelism, 0), p_par) END)
		ORDER BY a.agent_id
		FOR UPDATE OF a SKIP LOCKED
	LOOP
		EXIT WHEN taken >= p_max;
		-- Load the agent (as in step 2 below).
		par := CASE WHEN ag.probing THEN 1 ELSE coalesce(nullif(ag.parallelism, 0), p_par) END;
		IF par > 0 THEN
			SELECT count(*) INTO inflight FROM chronos_fires f
			WHERE f.agent_id = ag.agent_id AND f.state = 2 AND f.lease_until_ms > t;
			par := greatest(par - inflight, 0);
		ELSE
			par := -1;
		END IF;
		IF ag.disabled OR ag.gate_ms > t OR ag.tat_ms > t THEN
			par := 0;
		END IF;
		a_id := a_id || ag.agent_id;
		a_room := a_room || par;
		a_rate := a_rate || coalesce(nullif(ag.rate, 0), p_rate);
		a_tat := a_tat || ag.tat_ms;
		a_held := a_held || ag.has_held;
		a_was := a_was || ag.has_held;
		a_moved := a_moved || false;
		a_mine := a_mine || true;
		a_served := a_served || false;
		a_ep := a_ep || ag.ep;
		a_par := a_par || coalesce(nullif(ag.parallelism, 0), p_par);
		j := cardinality(a_id);
		-- Serve its held fires (as in step 2 below).
		IF a_held[j] AND a_room[j] <> 0 THEN
			a_served[j] := true;
			k := p_max - taken;
			IF a_room[j] > 0 THEN k := least(k, a_room[j]); END IF;
			IF a_rate[j] > 0 THEN k := least(k, 1); END IF;
			SELECT coalesce(array_agg(s.job_id ORDER BY s.due_ms, s.tie, s.seq), '{}') INTO got
			FROM (SELECT f.job_id, f.due_ms, f.tie, f.seq FROM chronos_fires f
				WHERE f.agent_id = a_id[j] AND f.state = 1
				ORDER BY f.due_ms, f.tie, f.seq LIMIT k FOR UPDATE SKIP LOCKED) s;
			n := cardinality(got);
			FOR i IN 1..n LOOP
				l_agent := l_agent || a_id[j];
				l_job := l_job || got[i];
			END LOOP;
			taken := taken + n;
			IF a_room[j] > 0 THEN a_room[j] := a_room[j] - n; END IF;
			IF n > 0 AND a_rate[j] > 0 THEN
				a_tat[j] := greatest(a_tat[j], t) + 1000 / a_rate[j];
				a_moved[j] := true;
				a_room[j] := 0;
			END IF;
			IF n < k AND NOT EXISTS (SELECT 1 FROM chronos_fires f
				WHERE f.agent_id = a_id[j] AND f.state = 1 AND NOT (f.job_id = ANY (got))) THEN
				a_held[j] := false;
			END IF;
		END IF;
	END LOOP;

	-- 2. Due queued fires, a page at a time.
	WHILE taken < p_max AND peeked < 4096 LOOP
		-- The next page (the first, or the one after the last fire read,
		-- by the index's order in both), and the agents met first in it.
		c_agent := '{}';
		c_job := '{}';
		fresh := '{}';
		n := 0;
		IF last_due IS NULL THEN
			FOR c IN SELECT f.agent_id, f.job_id, f.due_ms, f.tie, f.seq FROM chronos_fires f
				WHERE f.state = 0 AND f.due_ms <= t
				ORDER BY f.due_ms, f.tie, f.seq LIMIT page FOR UPDATE SKIP LOCKED
			LOOP
				c_agent := c_agent || c.agent_id;
				c_job := c_job || c.job_id;
				last_due := c.due_ms; last_tie := c.tie; last_seq := c.seq;
				n := n + 1;
				IF NOT (c.agent_id = ANY (a_id)) AND NOT (c.agent_id = ANY (fresh)) THEN
					fresh := fresh || c.agent_id;
				END IF;
			END LOOP;
		ELSE
			FOR c IN SELECT f.agent_id, f.job_id, f.due_ms, f.tie, f.seq FROM chronos_fires f
				WHERE f.state = 0 AND f.due_ms <= t AND (f.due_ms, f.tie, f.seq) > (last_due, last_tie, last_seq)
				ORDER BY f.due_ms, f.tie, f.seq LIMIT page FOR UPDATE SKIP LOCKED
			LOOP
				c_agent := c_agent || c.agent_id;
				c_job := c_job || c.job_id;
				last_due := c.due_ms; last_tie := c.tie; last_seq := c.seq;
				n := n + 1;
				IF NOT (c.agent_id = ANY (a_id)) AND NOT (c.agent_id = ANY (fresh)) THEN
					fresh := fresh || c.agent_id;
				END IF;
			END LOOP;
		END IF;
		EXIT WHEN n = 0;
		peeked := peeked + n;
		IF cardinality(fresh) > 0 THEN
			FOR ag IN
				SELECT a.agent_id, a.parallelism, a.rate, a.disabled, a.probing, a.gate_ms, a.tat_ms, a.has_held, a.ep
				FROM chronos_agents a WHERE a.agent_id = ANY (fresh)
				ORDER BY a.agent_id
				FOR UPDATE SKIP LOCKED
			LOOP
				-- Load the agent (as in step 1 above).
				par := CASE WHEN ag.probing THEN 1 ELSE coalesce(nullif(ag.parallelism, 0), p_par) END;
				IF par > 0 THEN
					SELECT count(*) INTO inflight FROM chronos_fires f
					WHERE f.agent_id = ag.agent_id AND f.state = 2 AND f.lease_until_ms > t;
					par := greatest(par - inflight, 0);
				ELSE
					par := -1;
				END IF;
				IF ag.disabled OR ag.gate_ms > t OR ag.tat_ms > t THEN
					par := 0;
				END IF;
				a_id := a_id || ag.agent_id;
				a_room := a_room || par;
				a_rate := a_rate || coalesce(nullif(ag.rate, 0), p_rate);
				a_tat := a_tat || ag.tat_ms;
				a_held := a_held || ag.has_held;
				a_was := a_was || ag.has_held;
				a_moved := a_moved || false;
				a_mine := a_mine || true;
				a_served := a_served || false;
				a_ep := a_ep || ag.ep;
				a_par := a_par || coalesce(nullif(ag.parallelism, 0), p_par);
				j := cardinality(a_id);
				-- Serve its held fires first (as in step 1 above).
				IF a_held[j] AND a_room[j] <> 0 AND taken < p_max THEN
					a_served[j] := true;
					k := p_max - taken;
					IF a_room[j] > 0 THEN k := least(k, a_room[j]); END IF;
					IF a_rate[j] > 0 THEN k := least(k, 1); END IF;
					SELECT coalesce(array_agg(s.job_id ORDER BY s.due_ms, s.tie, s.seq), '{}') INTO got
					FROM (SELECT f.job_id, f.due_ms, f.tie, f.seq FROM chronos_fires f
						WHERE f.agent_id = a_id[j] AND f.state = 1
						ORDER BY f.due_ms, f.tie, f.seq LIMIT k FOR UPDATE SKIP LOCKED) s;
					n := cardinality(got);
					FOR i IN 1..n LOOP
						l_agent := l_agent || a_id[j];
						l_job := l_job || got[i];
					END LOOP;
					taken := taken + n;
					IF a_room[j] > 0 THEN a_room[j] := a_room[j] - n; END IF;
					IF n > 0 AND a_rate[j] > 0 THEN
						a_tat[j] := greatest(a_tat[j], t) + 1000 / a_rate[j];
						a_moved[j] := true;
						a_room[j] := 0;
					END IF;
					IF n < k AND NOT EXISTS (SELECT 1 FROM chronos_fires f
						WHERE f.agent_id = a_id[j] AND f.state = 1 AND NOT (f.job_id = ANY (got))) THEN
						a_held[j] := false;
					END IF;
				END IF;
			END LOOP;
			-- Agents another transaction holds (their fires stay queued), or
			-- without a row (made now, for the next claim).
			SELECT coalesce(array_agg(y), '{}') INTO got FROM unnest(fresh) y WHERE NOT (y = ANY (a_id));
			IF cardinality(got) > 0 THEN
				INSERT INTO chronos_agents (agent_id)
				SELECT y FROM unnest(got) y WHERE NOT EXISTS (SELECT 1 FROM chronos_agents a WHERE a.agent_id = y)
				ON CONFLICT DO NOTHING;
			END IF;
			FOREACH x IN ARRAY got LOOP
				a_id := a_id || x;
				a_room := a_room || 0;
				a_rate := a_rate || 0::double precision;
				a_tat := a_tat || 0::double precision;
				a_held := a_held || false;
				a_was := a_was || false;
				a_moved := a_moved || false;
				a_mine := a_mine || false;
				a_served := a_served || false;
				a_ep := a_ep || 0;
				a_par := a_par || 0;
			END LOOP;
		END IF;
		n := cardinality(c_agent);
		FOR i IN 1..n LOOP
			EXIT WHEN taken >= p_max;
			j := array_position(a_id, c_agent[i]);
			CONTINUE WHEN NOT a_mine[j];
			IF a_held[j] OR a_room[j] = 0 THEN
				h_agent := h_agent || c_agent[i];
				h_job := h_job || c_job[i];
				a_held[j] := true;
			ELSE
				l_agent := l_agent || c_agent[i];
				l_job := l_job || c_job[i];
				taken := taken + 1;
				IF a_room[j] > 0 THEN a_room[j] := a_room[j] - 1; END IF;
				IF a_rate[j] > 0 THEN
					a_tat[j] := greatest(a_tat[j], t) + 1000 / a_rate[j];
					a_moved[j] := true;
					a_room[j] := 0;
				END IF;
			END IF;
		END LOOP;
		EXIT WHEN n < page;
	END LOOP;

	IF cardinality(h_job) > 0 THEN
		UPDATE chronos_fires f SET state = 1
		FROM unnest(h_agent, h_job) AS h(agent_id, job_id)
		WHERE f.agent_id = h.agent_id AND f.job_id = h.job_id;
	END IF;
	IF taken > 0 THEN
		UPDATE chronos_fires f SET state = 2, attempt = f.attempt + 1, token = nextval('chronos_token_seq'),
			lease_until_ms = t + p_lease_ms
		FROM unnest(l_agent, l_job) AS l(agent_id, job_id)
		WHERE f.agent_id = l.agent_id AND f.job_id = l.job_id;
	END IF;
	FOR i IN 1..cardinality(a_id) LOOP
		IF a_mine[i] AND (a_held[i] <> a_was[i] OR a_moved[i] OR (a_held[i] AND a_par[i] <> a_ep[i])) THEN
			u_id := u_id || a_id[i];
			u_held := u_held || a_held[i];
			u_tat := u_tat || a_tat[i];
			u_ep := u_ep || CASE WHEN a_held[i] THEN a_par[i] ELSE a_ep[i] END;
		END IF;
	END LOOP;
	IF cardinality(u_id) > 0 THEN
		UPDATE chronos_agents a SET has_held = u.held, tat_ms = u.tat, ep = u.ep
		FROM unnest(u_id, u_held, u_tat, u_ep) AS u(agent_id, held, tat, ep)
		WHERE a.agent_id = u.agent_id;
	END IF;
	-- 3. Flexible windows: the leased agents' open ones are due now.
	IF taken > 0 THEN
		UPDATE chronos_fires f SET due_ms = t
		FROM (SELECT p.agent_id, p.job_id FROM chronos_fires p
			WHERE p.agent_id = ANY (l_agent) AND p.flex_ms > 0 AND p.state <> 2 AND p.state = 0
				AND p.fire_at_ns <= t * 1000000 AND p.due_ms > t
			FOR UPDATE SKIP LOCKED) p
		WHERE f.agent_id = p.agent_id AND f.job_id = p.job_id;
	END IF;
	RETURN QUERY SELECT a.failures, coalesce(i.stopped, false),
		f.agent_id, f.job_id, f.schedule_id, f.instance_id,
		f.fire_at_ns, f.fire_at_spelling, f.callback_url, f.flex_ms, f.attempt, f.state, f.due_ms,
		f.token, f.lease_until_ms, f.created_ms, f.last_error, f.direct_sealed, f.direct_kid,
		f.direct_minted_ns
		FROM unnest(l_agent, l_job) WITH ORDINALITY AS l(agent_id, job_id, ord)
		JOIN chronos_fires f ON f.agent_id = l.agent_id AND f.job_id = l.job_id
		JOIN chronos_agents a ON a.agent_id = f.agent_id
		LEFT JOIN chronos_instances i ON i.instance_id = f.instance_id
		ORDER BY l.ord;
END
$$;

-- chronos_ack removes the delivered fires whose lease holds (p_agents[i],
-- p_jobs[i] under token p_tokens[i]); their agents stop probing (answering
-- again: failures and the Down hold go too), and when one of them holds
-- fires a wake-up is announced (the leases that ended gave it room).
--
-- Returns the index i of each fire removed, with whether a wake-up was
-- announced.
CREATE FUNCTION chronos_ack(p_now bigint, p_channel text, p_agents text[], p_jobs text[], p_tokens bigint[])
RETURNS TABLE (o_idx integer, o_woke boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	v_idx    integer[];
	v_agents text[];
	v_woke   boolean := false;
BEGIN
	WITH gone AS (
		DELETE FROM chronos_fires f
		USING unnest(p_agents, p_jobs, p_tokens) WITH ORDINALITY AS r(agent_id, job_id, token, idx)
		WHERE f.agent_id = r.agent_id AND f.job_id = r.job_id AND f.token = r.token AND f.state = 2
		RETURNING r.idx, f.agent_id
	)
	SELECT array_agg(g.idx::integer), array_agg(DISTINCT g.agent_id) INTO v_idx, v_agents FROM gone g;
	IF v_idx IS NULL THEN
		RETURN;
	END IF;
	PERFORM 1 FROM chronos_agents a WHERE a.agent_id = ANY (v_agents) AND a.probing
		ORDER BY a.agent_id FOR UPDATE;
	IF FOUND THEN
		UPDATE chronos_agents a SET probing = false, failures = 0, gate_ms = 0
		WHERE a.agent_id = ANY (v_agents) AND a.probing;
	END IF;
	IF EXISTS (SELECT 1 FROM chronos_agents a WHERE a.agent_id = ANY (v_agents) AND a.has_held AND NOT a.disabled) THEN
		v_woke := chronos_wake(p_channel);
	END IF;
	RETURN QUERY SELECT unnest(v_idx), v_woke;
END
$$;

-- chronos_nack returns a leased fire (token p_token) to the queue, due
-- p_delay_ms from now, with reason as its last error. With p_hold_ms (not
-- null) it is a Down: the agent starts probing, holds its fires until
-- p_hold_ms from now, and its failure count becomes at least p_failures. A
-- wake-up is announced when the fire is due at once or before every queued
-- one, or its agent holds fires.
--
-- Returns 0 when the lease is lost, 1, or 2 when it announced a wake-up.
CREATE FUNCTION chronos_nack(p_now bigint, p_channel text, p_agent text, p_job text, p_token bigint,
	p_delay_ms bigint, p_reason text, p_hold_ms bigint, p_failures integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t      bigint := chronos_now_ms(p_now);
	v_due  bigint := t + greatest(p_delay_ms, 0);
	v_min  bigint;
	v_held boolean;
BEGIN
	PERFORM 1 FROM chronos_fires f
	WHERE f.agent_id = p_agent AND f.job_id = p_job AND f.token = p_token AND f.state = 2 FOR UPDATE;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	-- The earliest queued fire: the head of chronos_fires_due, however
	-- stale the table's statistics (no aggregate over the table).
	SELECT f.due_ms INTO v_min FROM chronos_fires f WHERE f.state = 0 ORDER BY f.due_ms LIMIT 1;
	UPDATE chronos_fires f SET state = 0, token = 0, lease_until_ms = 0, due_ms = v_due, tie = 0,
		last_error = p_reason
	WHERE f.agent_id = p_agent AND f.job_id = p_job;
	IF p_hold_ms IS NOT NULL THEN
		INSERT INTO chronos_agents AS a (agent_id, probing, failures, gate_ms)
		VALUES (p_agent, true, p_failures, t + greatest(p_hold_ms, 0))
		ON CONFLICT (agent_id) DO UPDATE SET probing = true,
			failures = greatest(a.failures, p_failures),
			gate_ms = greatest(a.gate_ms, t + greatest(p_hold_ms, 0))
		RETURNING a.has_held INTO v_held;
	ELSE
		SELECT a.has_held INTO v_held FROM chronos_agents a WHERE a.agent_id = p_agent;
	END IF;
	IF v_due <= t OR v_min IS NULL OR v_due < v_min OR coalesce(v_held, false) THEN
		PERFORM pg_notify(p_channel, '');
		RETURN 2;
	END IF;
	RETURN 1;
END
$$;

-- chronos_kill moves a leased fire (token p_token) to the dead letter and
-- the end of its agent's failed-fire feed, which keeps the newest
-- p_feed_cap entries. A wake-up is announced when its agent holds fires.
--
-- Returns 0 when the lease is lost, 1, or 2 when it announced a wake-up.
CREATE FUNCTION chronos_kill(p_now bigint, p_channel text, p_agent text, p_job text, p_token bigint,
	p_reason text, p_feed_cap integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t      bigint := chronos_now_ms(p_now);
	old    chronos_fires%ROWTYPE;
	v_held boolean;
BEGIN
	DELETE FROM chronos_fires f
	WHERE f.agent_id = p_agent AND f.job_id = p_job AND f.token = p_token AND f.state = 2
	RETURNING * INTO old;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	INSERT INTO chronos_dead AS d (schedule_id, agent_id, job_id, instance_id, fire_at_ns, fire_at_spelling,
		callback_url, flex_ms, attempt, created_ms, last_error, direct_sealed, direct_kid, direct_minted_ns,
		reason, failed_ms, seq, in_feed)
	VALUES (old.schedule_id, old.agent_id, old.job_id, old.instance_id, old.fire_at_ns, old.fire_at_spelling,
		old.callback_url, old.flex_ms, old.attempt, old.created_ms, p_reason, old.direct_sealed, old.direct_kid,
		old.direct_minted_ns, p_reason, t, nextval('chronos_arm_seq'), true)
	ON CONFLICT (schedule_id) DO UPDATE SET agent_id = EXCLUDED.agent_id, job_id = EXCLUDED.job_id,
		instance_id = EXCLUDED.instance_id, fire_at_ns = EXCLUDED.fire_at_ns,
		fire_at_spelling = EXCLUDED.fire_at_spelling, callback_url = EXCLUDED.callback_url,
		flex_ms = EXCLUDED.flex_ms, attempt = EXCLUDED.attempt, created_ms = EXCLUDED.created_ms,
		last_error = EXCLUDED.last_error, direct_sealed = EXCLUDED.direct_sealed,
		direct_kid = EXCLUDED.direct_kid, direct_minted_ns = EXCLUDED.direct_minted_ns,
		reason = EXCLUDED.reason, failed_ms = EXCLUDED.failed_ms, seq = EXCLUDED.seq, in_feed = true;
	UPDATE chronos_dead d SET in_feed = false
	WHERE d.agent_id = p_agent AND d.in_feed
		AND (d.failed_ms, d.seq) < (SELECT e.failed_ms, e.seq FROM chronos_dead e
			WHERE e.agent_id = p_agent AND e.in_feed
			ORDER BY e.failed_ms DESC, e.seq DESC OFFSET greatest(p_feed_cap, 1) - 1 LIMIT 1);
	SELECT a.has_held INTO v_held FROM chronos_agents a WHERE a.agent_id = p_agent;
	IF coalesce(v_held, false) THEN
		PERFORM pg_notify(p_channel, '');
		RETURN 2;
	END IF;
	RETURN 1;
END
$$;

-- chronos_cancel removes the one-shot of (agent, job), whatever its
-- state. A lease it ends announces a wake-up when the agent holds fires.
--
-- Returns 0 when there was none, 1, or 2 when it announced a wake-up.
CREATE FUNCTION chronos_cancel(p_channel text, p_agent text, p_job text)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	v_state smallint;
	v_held  boolean;
BEGIN
	DELETE FROM chronos_fires f WHERE f.agent_id = p_agent AND f.job_id = p_job RETURNING f.state INTO v_state;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	IF v_state = 2 THEN
		SELECT a.has_held INTO v_held FROM chronos_agents a WHERE a.agent_id = p_agent;
		IF coalesce(v_held, false) THEN
			PERFORM pg_notify(p_channel, '');
			RETURN 2;
		END IF;
	END IF;
	RETURN 1;
END
$$;

-- chronos_cancel_agent removes every one-shot of an agent and its tie row;
-- its row (policy, probe, phase) stays, without held fires. Returns how
-- many.
CREATE FUNCTION chronos_cancel_agent(p_agent text)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	n integer;
BEGIN
	-- The tie row first, as arms take it.
	PERFORM 1 FROM chronos_ties a WHERE a.agent_id = p_agent FOR UPDATE;
	DELETE FROM chronos_fires f WHERE f.agent_id = p_agent;
	GET DIAGNOSTICS n = ROW_COUNT;
	UPDATE chronos_agents a SET has_held = false WHERE a.agent_id = p_agent AND a.has_held;
	DELETE FROM chronos_ties WHERE agent_id = p_agent;
	RETURN n;
END
$$;

-- chronos_reap returns up to p_limit expired leases to the queue, due now,
-- with the reason "lease expired"; leases another transaction holds are
-- left for the next reap. A wake-up is announced when it returned any, or
-- when some agent with held fires has room for them by the parallelism of
-- the claim that held them (the safety net of flow control).
--
-- Returns how many it returned and whether it announced a wake-up.
CREATE FUNCTION chronos_reap(p_now bigint, p_channel text, p_limit integer)
RETURNS TABLE (o_n integer, o_woke boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	t      bigint := chronos_now_ms(p_now);
	n      integer;
	v_woke boolean := false;
BEGIN
	UPDATE chronos_fires f SET state = 0, token = 0, lease_until_ms = 0, due_ms = t, tie = 0,
		last_error = 'lease expired'
	FROM (SELECT e.agent_id, e.job_id FROM chronos_fires e
		WHERE e.state = 2 AND e.lease_until_ms <= t
		ORDER BY e.lease_until_ms LIMIT p_limit FOR UPDATE SKIP LOCKED) e
	WHERE f.agent_id = e.agent_id AND f.job_id = e.job_id;
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n > 0 OR EXISTS (SELECT 1 FROM chronos_agents a
		WHERE a.has_held AND NOT a.disabled AND a.gate_ms <= t AND a.tat_ms <= t
			AND (NOT a.probing AND a.ep <= 0
				OR (SELECT count(*) FROM chronos_fires f
					WHERE f.agent_id = a.agent_id AND f.state = 2 AND f.lease_until_ms > t)
					< CASE WHEN a.probing THEN 1 ELSE a.ep END)) THEN
		v_woke := chronos_wake(p_channel);
	END IF;
	RETURN QUERY SELECT n, v_woke;
END
$$;

-- chronos_agent_phase returns the agent's spreading phase index, taking
-- the next of chronos_phase_seq on first use.
CREATE FUNCTION chronos_agent_phase(p_agent text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	v bigint;
BEGIN
	FOR pass IN 1..3 LOOP
		SELECT a.phase_n INTO v FROM chronos_agents a WHERE a.agent_id = p_agent;
		IF FOUND AND v > 0 THEN
			RETURN v;
		END IF;
		IF FOUND THEN
			UPDATE chronos_agents a SET phase_n = nextval('chronos_phase_seq')
			WHERE a.agent_id = p_agent AND a.phase_n = 0
			RETURNING a.phase_n INTO v;
		ELSE
			INSERT INTO chronos_agents (agent_id, phase_n) VALUES (p_agent, nextval('chronos_phase_seq'))
			ON CONFLICT DO NOTHING
			RETURNING phase_n INTO v;
		END IF;
		IF v IS NOT NULL AND v > 0 THEN
			RETURN v;
		END IF;
	END LOOP;
	RAISE EXCEPTION 'chronos: no phase for agent %', p_agent;
END
$$;
