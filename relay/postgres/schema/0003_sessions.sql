-- Chronos on PostgreSQL, migration 3: the operator sessions NAS revoked (a
-- logout), until each would have expired, so that a logout answered by one
-- NAS process holds on every other.
CREATE TABLE chronos_revoked_sessions (
	id         text   PRIMARY KEY,
	expires_ms bigint NOT NULL
);
CREATE INDEX chronos_revoked_sessions_expiry ON chronos_revoked_sessions (expires_ms);
