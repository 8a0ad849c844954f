// Package hermese2e is the compatibility test of Chronos NAS with agents
// built like a Hermes agent's Chronos cron provider: `chronos nas`, built
// from this module and started as a process on loopback with a configuration
// that names no signing algorithm, is driven by a Python program
// (testdata/hermes_agent.py) whose NAS client and fire endpoint behave as
// such an agent's do. Its client uses only urllib, provisions fire_at with a
// +hh:mm offset and dedup_key job_id:fire_at, reads one page of list without
// parameters, ignores failed_fires, and on a cold start compares list's
// fire_at strings with the ones it would send. Its fire endpoint verifies
// tokens with PyJWT's PyJWKClient, allowing only RS256/RS384/RS512/ES256/ES384,
// and answers 401 while its key set is cold.
//
// The Python interpreter must import jwt (PyJWT with PyJWKClient) and
// cryptography: CHRONOS_TEST_PYTHON when set (then only it), else python3 on
// PATH, else /usr/bin/python3, where Debian's python3-jwt and
// python3-cryptography install (`make deps` installs them). Without one the
// tests fail, never skip.
//
// Each scenario runs twice: on the embedded store, and (its OnPostgres
// twin) on a NAS whose store is PostgreSQL, a schema of its own that NAS
// migrates at start on the throwaway server internal/pgtest starts (or the
// one TEST_POSTGRES_URL names).
package hermese2e
