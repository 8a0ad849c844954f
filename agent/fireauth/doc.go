// Package fireauth verifies the cron_fire tokens NAS sends with every fire
// (hop 3 of the contract).
//
// A JWTVerifier checks, for one POST /api/cron/fire:
//
//   - the signature against NAS's JWKS, fetched with an HTTP client that has
//     a timeout and a capped response body, at start (retried with backoff
//     until it succeeds), every RefreshInterval, and when a token names a
//     kid the set lacks (see below);
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
// that never echoes expected values, or 503 temporarily_unavailable with a
// retry delay when only the key set can decide and it cannot now. That is
// the case while the key set has not been loaded yet, and for a token whose
// kid the set lacks: NAS may have activated a key a moment ago. Such a token
// starts a fetch of the key set unless another unknown kid started one
// within UnknownKIDInterval (10 s); fetches are shared by every caller
// waiting, and a token that finds the gate closed is answered 503 with
// Retry-After until it opens. Callers who present no valid signature can
// therefore cost NAS at most one fetch per interval (besides the periodic
// refresh), and can never use up the fetch a real fire signed with a new key
// needs: it verifies at once, or on NAS's retry. A token that fails any
// check needing no key (form, algorithm, headers, claims, body binding) is
// a 401 at once in every case and fetches nothing. Readiness waits for the
// first successful load, and failed loads leave no debt.
//
// Under direct delivery a DirectVerifier sits in front of the JWTVerifier:
// a token whose header says HS256 is verified under the cron key of the
// job it names (CronKeys) and nothing else, with the same claim checks;
// any other goes to the JWTVerifier unless its job is delivered directly.
// See direct.go.
package fireauth
