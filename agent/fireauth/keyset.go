package fireauth

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"

	"github.com/chronoscron/chronos/internal/backoff"
)

// keySet is one fetched key set; it is never changed once built.
type keySet struct {
	kf keyfunc.Keyfunc
	// byKID is what kf answers for each kid: the first key of the set
	// with that kid (as the storage's lookup finds it), for the lean path.
	byKID     map[string]setKey
	keys      int
	fetchedAt time.Time
}

// setKey is one key of a keySet as the keyfunc hands it out: the JWK's alg
// ("" when it names none) and the verification key.
type setKey struct {
	alg string
	key any
}

// publicKeyer is a private key, of which the keyfunc hands out the public half.
type publicKeyer interface {
	Public() crypto.PublicKey
}

// newSetKey reads jwk as the keyfunc does.
func newSetKey(jwk jwkset.JWK) setKey {
	key := jwk.Key()
	if pk, ok := key.(publicKeyer); ok {
		key = pk.Public()
	}
	return setKey{alg: jwk.Marshal().ALG.String(), key: key}
}

// fetchCall is one fetch of the key set, shared by every caller that asks
// for a fetch while it runs. err is set before done is closed.
type fetchCall struct {
	done chan struct{}
	err  error
}

// parseKeySet builds a key set from a JWKS document. Keys of a type jwkset
// does not support, and keys that fail its validation, are left out (and
// logged); a document without one usable key is an error.
func parseKeySet(ctx context.Context, raw []byte, now time.Time, log *slog.Logger) (*keySet, error) {
	var doc jwkset.JWKSMarshal
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("fireauth: key set: not a JWKS document: %w", err)
	}
	store := jwkset.NewMemoryStorage()
	byKID := map[string]setKey{}
	n := 0
	for i, m := range doc.Keys {
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			if !errors.Is(err, jwkset.ErrUnsupportedKey) {
				log.Warn("fireauth: a key of the key set is unusable", "index", i, "kid", m.KID, "error", err)
			}
			continue
		}
		if err := store.KeyWrite(ctx, jwk); err != nil {
			return nil, fmt.Errorf("fireauth: key set: %w", err)
		}
		if kid := jwk.Marshal().KID; kid != "" {
			if _, dup := byKID[kid]; !dup {
				byKID[kid] = newSetKey(jwk)
			}
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("fireauth: key set has no usable key")
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: store})
	if err != nil {
		return nil, fmt.Errorf("fireauth: key set: %w", err)
	}
	return &keySet{kf: kf, byKID: byKID, keys: n, fetchedAt: now}, nil
}

// run loads the key set, retrying with backoff until one load succeeds, then
// fetches it again every RefreshInterval, until ctx ends.
func (v *JWTVerifier) run(ctx context.Context) {
	if err := v.load(ctx); err != nil {
		return // ctx ended
	}
	t := time.NewTimer(v.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = v.await(ctx, v.fetch(TriggerPeriodic))
		t.Reset(v.cfg.RefreshInterval)
	}
}

// load fetches the key set until one fetch succeeds (or another fetch,
// for an unknown kid, loaded it meanwhile), waiting between tries on the
// LoadBackoff schedule; it returns an error only when ctx ends (or its
// deadline leaves no time for another try).
func (v *JWTVerifier) load(ctx context.Context) error {
	r := backoff.Retrier{Policy: backoff.Policy{
		Base: v.cfg.LoadBackoff, Max: v.cfg.LoadBackoffMax, Jitter: backoff.JitterUpperHalf,
	}}
	return r.Do(ctx, func(ctx context.Context, _ int) error {
		if v.set.Load() != nil {
			return nil
		}
		if err := v.await(ctx, v.fetch(TriggerLoad)); err != nil {
			return err
		}
		if v.set.Load() == nil {
			return errors.New("fireauth: the key set fetched is not in use")
		}
		return nil
	})
}

// await waits for call and returns its error, or ctx's.
func (v *JWTVerifier) await(ctx context.Context, call *fetchCall) error {
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetch returns the fetch in progress, or starts one for trigger.
func (v *JWTVerifier) fetch(trigger string) *fetchCall {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inflight != nil {
		return v.inflight
	}
	return v.startLocked(trigger)
}

// fetchForUnknownKID returns the fetch in progress, or starts one when the
// last fetch started for an unknown kid started at least UnknownKIDInterval
// ago. Otherwise it returns nil and the time until one may start.
func (v *JWTVerifier) fetchForUnknownKID() (*fetchCall, time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inflight != nil {
		return v.inflight, 0
	}
	if wait := v.untilLocked(); wait > 0 {
		return nil, wait
	}
	return v.startLocked(TriggerUnknownKID), 0
}

// untilUnknownKIDFetch returns how long until an unknown kid may start a
// fetch: at least a second, so that a retry finds the gate open.
func (v *JWTVerifier) untilUnknownKIDFetch() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return max(v.untilLocked(), time.Second)
}

func (v *JWTVerifier) untilLocked() time.Duration {
	if v.lastUnknownKID.IsZero() {
		return 0
	}
	return v.lastUnknownKID.Add(v.cfg.UnknownKIDInterval).Sub(v.cfg.Now())
}

// startLocked starts a fetch for trigger on the verifier's own context (a
// caller that stops waiting does not cancel a fetch others share). The
// caller holds v.mu.
func (v *JWTVerifier) startLocked(trigger string) *fetchCall {
	call := &fetchCall{done: make(chan struct{})}
	if v.closed || v.static {
		call.err = errors.New("fireauth: the verifier fetches no key set")
		if v.closed {
			call.err = fmt.Errorf("fireauth: %w", context.Canceled)
		}
		close(call.done)
		return call
	}
	v.inflight = call
	if trigger == TriggerUnknownKID {
		v.lastUnknownKID = v.cfg.Now()
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		set, err := v.download(v.ctx)
		v.finish(trigger, set, err)
		v.mu.Lock()
		if v.inflight == call { // installed may have ended it, and another begun
			v.inflight = nil
		}
		v.mu.Unlock()
		call.err = err
		close(call.done)
	}()
	return call
}

// download fetches and parses the key set once.
func (v *JWTVerifier) download(ctx context.Context) (*keySet, error) {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.HTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fireauth: key set request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fireauth: fetching the key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("fireauth: fetching the key set: answered %d", resp.StatusCode)
	}
	// The client made by NewJWKSClient caps the body already; a client
	// given in Config may not.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, v.cfg.MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fireauth: reading the key set: %w", err)
	}
	if int64(len(raw)) > v.cfg.MaxJWKSBytes {
		return nil, fmt.Errorf("fireauth: reading the key set: %w: the limit is %d bytes", ErrBodyTooLarge, v.cfg.MaxJWKSBytes)
	}
	return parseKeySet(v.ctx, raw, v.cfg.Now(), v.cfg.Logger)
}

// finish records a fetch's result: a new key set replaces the one in use
// (NAS's set is the truth, a withdrawn key is dropped); a failure keeps it.
func (v *JWTVerifier) finish(trigger string, set *keySet, err error) {
	if errors.Is(err, context.Canceled) && v.ctx.Err() != nil {
		return // shutting down, not a key set failure
	}
	v.mu.Lock()
	c := v.health.Fetches[trigger]
	if err != nil {
		c.Failed++
		v.health.Fetches[trigger] = c
		v.health.LastError = err.Error()
		v.health.LastErrorAt = v.cfg.Now()
		v.health.Failures++
		v.mu.Unlock()
		v.cfg.Logger.Warn("fireauth: fetching the key set failed", "url", v.cfg.JWKSURL, "trigger", trigger, "error", err)
		return
	}
	c.OK++
	v.health.Fetches[trigger] = c
	v.mu.Unlock()
	v.installed(set)
}

// installed makes set the key set in use.
func (v *JWTVerifier) installed(set *keySet) {
	v.set.Store(set)
	v.mu.Lock()
	// The fetch that brought set is over once set is in use: a caller whose
	// kid set lacks must start a fetch of its own (rate limit permitting),
	// not wait on this one, which may have begun before NAS published the
	// key. Fetches are single-flight, so the one in flight is set's.
	v.inflight = nil
	first := !v.health.Loaded
	v.health.Loaded = true
	v.health.FetchedAt = set.fetchedAt
	if first {
		v.health.LoadedAt = set.fetchedAt
	}
	v.mu.Unlock()
	if first {
		close(v.ready)
	}
}
