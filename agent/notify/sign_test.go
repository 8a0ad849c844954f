package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The example published with the Standard Webhooks specification.
func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	s, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	if s.String() != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
		t.Fatalf("String %s", s)
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"whsec_!!!", "whsec_" + base64.StdEncoding.EncodeToString([]byte("short")), ""} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) accepted", bad)
		}
	}
	s := NewSecret()
	p, err := ParseSecret(s.String())
	if err != nil || !hmac.Equal(p, s) {
		t.Fatalf("round trip: %v", err)
	}
}

// verifyStandardWebhook is a receiver's check written from the
// specification alone: the signed content is "id.timestamp.body", the key
// is the base64 after "whsec_", the header holds space-separated
// "v1,<base64>" signatures, and the timestamp must be within 5 minutes.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" {
		return errors.New("missing headers")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return err
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp outside tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching signature")
}

func TestLoadOrCreateSecretRace(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "notify")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			s, err := LoadOrCreateSecret(dir)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = s.String()
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] || g == "" {
			t.Fatalf("processes disagree on the secret: %v", got)
		}
	}
	st, err := os.Stat(filepath.Join(dir, SecretFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", st, err)
	}
	again, err := LoadOrCreateSecret(dir)
	if err != nil || again.String() != got[0] {
		t.Fatalf("reload: %v", err)
	}
}
