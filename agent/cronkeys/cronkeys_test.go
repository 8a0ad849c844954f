package cronkeys_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/contract"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func newKey(t *testing.T, id string) contract.ProvisionResponse {
	t.Helper()
	b := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return contract.ProvisionResponse{Delivery: contract.DeliveryDirect, CronKey: base64.RawURLEncoding.EncodeToString(b), CronKeyID: contract.CronKeyIDPrefix + id}
}

func secretOf(t *testing.T, r contract.ProvisionResponse) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(r.CronKey)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func open(t *testing.T, home string, c *clock, log *bytes.Buffer) *cronkeys.Store {
	t.Helper()
	o := cronkeys.Options{Now: c.Now, PendingWait: 2 * time.Second}
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := cronkeys.Open(home, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreFileIsPrivateAndAtomic(t *testing.T) {
	home := t.TempDir()
	c := &clock{t: t0}
	s := open(t, home, c, nil)
	ctx := context.Background()
	k := newKey(t, "a")
	if err := s.Provisioned(ctx, "backup", t0.Add(time.Hour), contract.DeliveryDirect, k); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(home, cronkeys.File))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", info.Mode().Perm())
	}
	entries, err := os.ReadDir(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
	// Another process's store reads the same keys.
	other := open(t, home, c, nil)
	got, through, ok := other.CronKey(ctx, "backup", k.CronKeyID)
	if !ok || !bytes.Equal(got, secretOf(t, k)) || !through.IsZero() {
		t.Fatalf("CronKey = %v, %v, %v; want the current key", ok, through, got != nil)
	}
	if !other.Direct("backup") || other.Delivery("backup") != cronkeys.Direct || other.Delivery("other") != cronkeys.NAS {
		t.Fatal("deliveries wrong")
	}
}

func TestStoreRetireAndPurge(t *testing.T) {
	home := t.TempDir()
	c := &clock{t: t0}
	s := open(t, home, c, nil)
	ctx := context.Background()
	slot1, slot2, slot3 := t0.Add(time.Hour), t0.Add(2*time.Hour), t0.Add(3*time.Hour)
	k1, k2 := newKey(t, "one"), newKey(t, "two")
	steps := []struct {
		at   time.Time
		resp contract.ProvisionResponse
	}{{slot1, k1}, {slot2, k1}, {slot3, k2}}
	for _, st := range steps {
		if err := s.Provisioned(ctx, "job", st.at, contract.DeliveryDirect, st.resp); err != nil {
			t.Fatal(err)
		}
	}
	_, through, ok := s.CronKey(ctx, "job", k1.CronKeyID)
	if !ok || !through.Equal(slot2) {
		t.Fatalf("retired key: ok %v, valid through %v; want %v", ok, through, slot2)
	}
	if _, through, ok := s.CronKey(ctx, "job", k2.CronKeyID); !ok || !through.IsZero() {
		t.Fatal("the new key is not current")
	}
	// NAS refuses direct now: no current key; k2 retired through slot3.
	if err := s.Provisioned(ctx, "job", t0.Add(4*time.Hour), contract.DeliveryDirect, contract.ProvisionResponse{Delivery: contract.DeliveryNAS}); err != nil {
		t.Fatal(err)
	}
	if s.Direct("job") {
		t.Fatal("still direct after a NAS-mediated answer")
	}
	if _, through, ok := s.CronKey(ctx, "job", k2.CronKeyID); !ok || !through.Equal(slot3) {
		t.Fatalf("k2 retired through %v, %v", through, ok)
	}
	if j, _ := s.Job("job"); !j.Refused {
		t.Fatal("the refusal is not recorded")
	}
	// A day after slot2, k1 is purged at the next write; k2 is kept.
	c.Set(slot2.Add(cronkeys.RetiredGrace + time.Second))
	if err := s.Keep(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.CronKey(ctx, "job", k1.CronKeyID); ok {
		t.Fatal("k1 not purged a day after its last slot")
	}
	if _, _, ok := s.CronKey(ctx, "job", k2.CronKeyID); !ok {
		t.Fatal("k2 purged early")
	}
}

func TestStoreDropOnCancel(t *testing.T) {
	home := t.TempDir()
	c := &clock{t: t0}
	s := open(t, home, c, nil)
	ctx := context.Background()
	ka, kb := newKey(t, "a"), newKey(t, "b")
	_ = s.Provisioned(ctx, "a", t0.Add(time.Hour), contract.DeliveryDirect, ka)
	_ = s.Provisioned(ctx, "b", t0.Add(time.Hour), contract.DeliveryDirect, kb)
	if err := s.Drop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.CronKey(ctx, "a", ka.CronKeyID); ok || s.Direct("a") {
		t.Fatal("a's key survived its cancel")
	}
	// Removal: Keep drops the keys of jobs that are gone.
	if err := s.Keep(ctx, func(id string) bool { return id != "b" }); err != nil {
		t.Fatal(err)
	}
	if s.HasKeys("b") {
		t.Fatal("b's key survived its removal")
	}
	data, err := os.ReadFile(filepath.Join(home, cronkeys.File))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(ka.CronKey)) || bytes.Contains(data, []byte(kb.CronKey)) {
		t.Fatal("a dropped key is still in the file")
	}
}

func TestStoreMediatedProvisionRetires(t *testing.T) {
	s := open(t, t.TempDir(), &clock{t: t0}, nil)
	ctx := context.Background()
	k := newKey(t, "a")
	_ = s.Provisioned(ctx, "j", t0.Add(time.Hour), contract.DeliveryDirect, k)
	if err := s.Provisioned(ctx, "j", t0.Add(2*time.Hour), "", contract.ProvisionResponse{}); err != nil {
		t.Fatal(err)
	}
	j, _ := s.Job("j")
	if j.Current != nil || j.Refused || len(j.Retired) != 1 || !j.Retired[0].ValidThrough.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a mediated provision: %+v", j)
	}
}

func TestStoreRefusesMalformedKey(t *testing.T) {
	s := open(t, t.TempDir(), &clock{t: t0}, nil)
	bad := []contract.ProvisionResponse{
		{Delivery: contract.DeliveryDirect, CronKey: "short", CronKeyID: "ck_x"},
		{Delivery: contract.DeliveryDirect, CronKey: newKey(t, "x").CronKey, CronKeyID: "nope"},
	}
	for _, r := range bad {
		err := s.Provisioned(context.Background(), "j", t0, contract.DeliveryDirect, r)
		if err == nil || strings.Contains(err.Error(), r.CronKey) {
			t.Fatalf("malformed key: %v", err)
		}
	}
}

func TestStoreLookupWaitsForPendingProvision(t *testing.T) {
	s := open(t, t.TempDir(), &clock{t: t0}, nil)
	ctx := context.Background()
	k := newKey(t, "late")
	end := s.Begin("j")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = s.Provisioned(ctx, "j", t0.Add(time.Hour), contract.DeliveryDirect, k)
		end()
	}()
	if _, _, ok := s.CronKey(ctx, "j", k.CronKeyID); !ok {
		t.Fatal("a key stored by a provision in progress was not found")
	}
}

func TestStoreCorruptFileSetAside(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, cronkeys.File)
	if err := os.WriteFile(path, []byte(`{"jobs": {"x": {"current": {"key": "c2VjcmV0`), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	s := open(t, home, &clock{t: t0}, &log)
	if s.HasKeys("x") {
		t.Fatal("keys read from a corrupt file")
	}
	if err := s.Provisioned(context.Background(), "j", t0.Add(time.Hour), contract.DeliveryDirect, newKey(t, "a")); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(path + ".corrupt-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt file not set aside: %v", matches)
	}
	if strings.Contains(log.String(), "c2VjcmV0") {
		t.Fatal("the log quotes the key file")
	}
	var c struct {
		Jobs map[string]json.RawMessage `json:"jobs"`
	}
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &c); err != nil || len(c.Jobs) != 1 {
		t.Fatalf("rewritten file: %v %s", err, c.Jobs)
	}
}

func TestKeyNeverPrinted(t *testing.T) {
	k := cronkeys.Key{ID: "ck_id", Key: "c2VjcmV0c2VjcmV0"}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "key", k)
	for _, s := range []string{k.String(), k.GoString(), buf.String()} {
		if strings.Contains(s, k.Key) {
			t.Fatalf("key shown: %s", s)
		}
	}
}
