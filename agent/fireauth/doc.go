// Package fireauth verifies the cron_fire tokens NAS sends with every fire
// (hop 3 of the contract).
//
// A JWTVerifier checks, for one POST /api/cron/fire:
//
//   - the signature against NAS's JWKS, fetched through keyfunc with an HTTP
//     client that has a timeout and a capped response body; an unknown kid
//     triggers a refresh that is rate limited on purpose (see Config);
//   - the algorithm against an allow-list (never none, never HMAC);
//   - the header: kid present, typ equal to cron-fire+jwt;
//   - the claims: exp and iat present, exp and nbf within the leeway (30 s),
//     a lifetime exp - iat of at most 120 s, aud equal to the one expected
//     audience (an array does not decode), iss equal to NAS's URL, purpose
//     equal to cron_fire;
//   - the binding to the request: job_id, fire_at, schedule_id and attempt
//     equal to the body's, and bh equal to the hash of the exact body bytes.
//
// Every failure is a *contract.Error: 401 invalid_token with a short reason
// that never echoes expected values, or 503 temporarily_unavailable (with a
// retry delay) while the key set has not been loaded yet and the token passes
// every check that needs no key (one that fails such a check is a 401 at
// once), or when a token's
// kid is unknown and fetching the key set to look for it fails (NAS may have
// rotated while its key set is unreachable; NAS retries). Readiness waits for
// the first successful load of the key set, which is retried with backoff and
// does not spend the unknown-kid refresh allowance.
package fireauth
