package contract_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// The published Standard Webhooks example: this secret, id, timestamp and
// payload sign to this value.
func TestSignWebhookKnownAnswer(t *testing.T) {
	t.Parallel()
	k, err := contract.ParseWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	const (
		id   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	if got := contract.SignWebhook(k, id, ts, body); got != want {
		t.Errorf("SignWebhook = %s, want %s", got, want)
	}
	// The same value computed here from the definition.
	m := hmac.New(sha256.New, k)
	m.Write([]byte(id + ".1614265330." + string(body)))
	if got := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); got != want {
		t.Errorf("HMAC from the definition = %s, want %s", got, want)
	}
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: id, Timestamp: "1614265330", Signature: want, Body: body},
		contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: ts.Add(time.Minute)}); err != nil {
		t.Errorf("VerifyWebhook: %v", err)
	}
}

func TestWebhookRoundTrip(t *testing.T) {
	t.Parallel()
	secret := contract.FormatWebhookSecret(key(7))
	k, err := contract.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatalf("ParseWebhookSecret(%q): %v", secret, err)
	}
	if !bytes.Equal(k, key(7)) {
		t.Fatalf("secret round trip: %x", k)
	}
	ts := time.Unix(1781773200, 0)
	body := []byte(`{"schedule_id":"s1","agent_id":"a1","job_id":"j1","fire_at":"2026-06-18T09:00:00Z","attempt":1}`)
	h := contract.WebhookHeaders([][]byte{k}, "dlv_1", ts, body)
	if h[contract.HeaderWebhookID] != "dlv_1" || h[contract.HeaderWebhookTimestamp] != "1781773200" {
		t.Errorf("headers %v", h)
	}
	if !strings.HasPrefix(h[contract.HeaderWebhookSignature], "v1,") {
		t.Errorf("signature %q lacks the v1, prefix", h[contract.HeaderWebhookSignature])
	}
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp], Signature: h[contract.HeaderWebhookSignature], Body: body},
		contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: ts}); err != nil {
		t.Errorf("VerifyWebhook: %v", err)
	}
}

func TestWebhookRotation(t *testing.T) {
	t.Parallel()
	old, next, other := key(1), key(2), key(3)
	ts := time.Unix(1781773200, 0)
	body := []byte(`{"a":1}`)
	both := contract.WebhookHeaders([][]byte{old, next}, "id", ts, body)[contract.HeaderWebhookSignature]
	if n := len(strings.Fields(both)); n != 2 {
		t.Fatalf("signature header %q: %d signatures, want 2", both, n)
	}
	onlyOld := contract.SignWebhook(old, "id", ts, body)
	onlyNext := contract.SignWebhook(next, "id", ts, body)
	for _, tc := range []struct {
		name string
		keys [][]byte
		sig  string
		ok   bool
	}{
		{"sender signs with both, receiver knows old", [][]byte{old}, both, true},
		{"sender signs with both, receiver knows next", [][]byte{next}, both, true},
		{"receiver knows both, sender signs with old", [][]byte{next, old}, onlyOld, true},
		{"receiver knows both, sender signs with next", [][]byte{next, old}, onlyNext, true},
		{"matching signature second in the list", [][]byte{next}, onlyOld + " " + onlyNext, true},
		{"extra white space between signatures", [][]byte{next}, "  " + onlyOld + "   " + onlyNext + " ", true},
		{"receiver knows neither", [][]byte{other}, both, false},
		{"receiver moved on past old", [][]byte{next}, onlyOld, false},
		{"no keys configured", nil, both, false},
	} {
		err := contract.VerifyWebhook(contract.WebhookCall{ID: "id", Timestamp: strconv.FormatInt(ts.Unix(), 10), Signature: tc.sig, Body: body},
			contract.WebhookVerifyOptions{Keys: tc.keys, Now: ts})
		if (err == nil) != tc.ok {
			t.Errorf("%s: VerifyWebhook = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, contract.ErrWebhookSignature) {
			t.Errorf("%s: %v does not wrap ErrWebhookSignature", tc.name, err)
		}
	}
}

// The options' zero values are the receiver's clock and WebhookTolerance; a
// tolerance given is the one applied.
func TestVerifyWebhookOptions(t *testing.T) {
	t.Parallel()
	k := key(7)
	body := []byte(`{"a":1}`)
	call := func(sent time.Time) contract.WebhookCall {
		h := contract.WebhookHeaders([][]byte{k}, "id-1", sent, body)
		return contract.WebhookCall{ID: h[contract.HeaderWebhookID], Timestamp: h[contract.HeaderWebhookTimestamp],
			Signature: h[contract.HeaderWebhookSignature], Body: body}
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		sent time.Time
		opts contract.WebhookVerifyOptions
		ok   bool
	}{
		{"zero Now is the clock", now, contract.WebhookVerifyOptions{Keys: [][]byte{k}}, true},
		{"zero Now refuses an old call", now.Add(-time.Hour), contract.WebhookVerifyOptions{Keys: [][]byte{k}}, false},
		{"zero Tolerance is WebhookTolerance", now.Add(-contract.WebhookTolerance + 10*time.Second),
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: now}, true},
		{"beyond the default", now.Add(-contract.WebhookTolerance - time.Second),
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: now}, false},
		{"a wider tolerance given", now.Add(-contract.WebhookTolerance - time.Second),
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: now, Tolerance: 10 * time.Minute}, true},
		{"a narrower tolerance given", now.Add(-time.Minute),
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: now, Tolerance: 30 * time.Second}, false},
		{"no keys", now, contract.WebhookVerifyOptions{Now: now}, false},
		{"another key", now, contract.WebhookVerifyOptions{Keys: [][]byte{key(8)}, Now: now}, false},
	} {
		err := contract.VerifyWebhook(call(tc.sent), tc.opts)
		if (err == nil) != tc.ok {
			t.Errorf("%s: VerifyWebhook = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestWebhookTolerance(t *testing.T) {
	t.Parallel()
	k := key(9)
	ts := time.Unix(1781773200, 0)
	body := []byte(`{}`)
	sig := contract.SignWebhook(k, "id", ts, body)
	for _, tc := range []struct {
		skew time.Duration // now - ts
		ok   bool
	}{
		{0, true},
		{5 * time.Minute, true},
		{-5 * time.Minute, true},
		{5*time.Minute + time.Second, false},
		{-5*time.Minute - time.Second, false},
		{5*time.Minute + time.Nanosecond, false},
		{time.Hour, false},
		{-time.Hour, false},
	} {
		err := contract.VerifyWebhook(contract.WebhookCall{ID: "id", Timestamp: "1781773200", Signature: sig, Body: body},
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: ts.Add(tc.skew)})
		if (err == nil) != tc.ok {
			t.Errorf("now - timestamp = %s: VerifyWebhook = %v, want ok=%v", tc.skew, err, tc.ok)
		}
	}
}

func TestWebhookRejects(t *testing.T) {
	t.Parallel()
	k := key(5)
	ts := time.Unix(1781773200, 0)
	const id = "dlv_42"
	body := []byte(`{"schedule_id":"s1"}`)
	good := contract.SignWebhook(k, id, ts, body)
	enc := strings.TrimPrefix(good, "v1,")
	tsStr := "1781773200"
	for _, tc := range []struct {
		name        string
		id, ts, sig string
		body        []byte
	}{
		{"altered body", id, tsStr, good, []byte(`{"schedule_id":"s2"}`)},
		{"body with a trailing newline", id, tsStr, good, append(append([]byte(nil), body...), '\n')},
		{"altered id", "dlv_43", tsStr, good, body},
		{"altered timestamp", id, "1781773201", good, body},
		{"timestamp with leading zero", id, "01781773200", good, body},
		{"timestamp with plus sign", id, "+1781773200", good, body},
		{"timestamp not a number", id, "yesterday", good, body},
		{"timestamp in milliseconds", id, "1781773200000", good, body},
		{"empty timestamp", id, "", good, body},
		{"empty id", "", tsStr, good, body},
		{"oversized id", strings.Repeat("x", 257), tsStr, good, body},
		{"wrong version", id, tsStr, "v2," + enc, body},
		{"v1a prefix", id, tsStr, "v1a," + enc, body},
		{"no version", id, tsStr, enc, body},
		{"upper-case version", id, tsStr, "V1," + enc, body},
		{"malformed base64", id, tsStr, "v1," + enc[:len(enc)-2] + "!!", body},
		{"unpadded base64", id, tsStr, "v1," + strings.TrimRight(enc, "="), body},
		{"truncated signature", id, tsStr, "v1," + base64.StdEncoding.EncodeToString([]byte("short")), body},
		{"empty signature", id, tsStr, "", body},
		{"hex instead of base64", id, tsStr, "v1,deadbeef", body},
	} {
		err := contract.VerifyWebhook(contract.WebhookCall{ID: tc.id, Timestamp: tc.ts, Signature: tc.sig, Body: tc.body},
			contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: ts})
		if err == nil {
			t.Errorf("%s: VerifyWebhook accepted it", tc.name)
		} else if !errors.Is(err, contract.ErrWebhookSignature) {
			t.Errorf("%s: %v does not wrap ErrWebhookSignature", tc.name, err)
		}
	}
	// A malformed signature beside a good one does not hide the good one.
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: id, Timestamp: tsStr, Signature: "v1,!!! v2," + enc + " " + good, Body: body},
		contract.WebhookVerifyOptions{Keys: [][]byte{k}, Now: ts}); err != nil {
		t.Errorf("good signature after malformed ones: %v", err)
	}
}

func TestParseWebhookSecret(t *testing.T) {
	t.Parallel()
	k24 := bytes.Repeat([]byte{0xab}, 24)
	k23 := bytes.Repeat([]byte{0xab}, 23)
	for _, tc := range []struct {
		name string
		in   string
		want []byte // nil: an error
	}{
		{"plain", contract.FormatWebhookSecret(k24), k24},
		{"surrounding white space", " \t" + contract.FormatWebhookSecret(k24) + "\r\n", k24},
		{"32-byte key", contract.FormatWebhookSecret(key(1)), key(1)},
		{"short key", contract.FormatWebhookSecret(k23), nil},
		{"empty key", "whsec_", nil},
		{"no prefix", base64.StdEncoding.EncodeToString(k24), nil},
		{"upper-case prefix", "WHSEC_" + base64.StdEncoding.EncodeToString(k24), nil},
		{"bad base64", "whsec_not*base64*at*all*!!!!!!!!!!!!!!", nil},
		{"white space inside", "whsec_" + base64.StdEncoding.EncodeToString(k24)[:8] + " " + base64.StdEncoding.EncodeToString(k24)[8:], nil},
		{"empty", "", nil},
	} {
		got, err := contract.ParseWebhookSecret(tc.in)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s: ParseWebhookSecret(%q) = %x, want an error", tc.name, tc.in, got)
		case tc.want != nil && err != nil:
			t.Errorf("%s: ParseWebhookSecret(%q): %v", tc.name, tc.in, err)
		case tc.want != nil && !bytes.Equal(got, tc.want):
			t.Errorf("%s: ParseWebhookSecret(%q) = %x, want %x", tc.name, tc.in, got, tc.want)
		}
	}
	// The base64 failure is wrapped, not flattened.
	_, err := contract.ParseWebhookSecret("whsec_***")
	var cie base64.CorruptInputError
	if !errors.As(err, &cie) {
		t.Errorf("bad base64: %v does not wrap base64.CorruptInputError", err)
	}
}
