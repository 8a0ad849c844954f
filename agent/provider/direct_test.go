package provider_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/contract"
)

// keyedNAS is fakeNAS granting direct delivery (when grant): it answers
// each direct provision with the job's cron key, minting one for a job
// that has none or was re-keyed, and lists the arms with their delivery.
type keyedNAS struct {
	*fakeNAS
	grant bool
	keys  map[string]contract.ProvisionResponse
	rekey map[string]bool
	asked []string // the delivery of every provision, "job:delivery"
	// onAnswer runs as NAS answers (after it armed), outside its lock.
	onAnswer func(jobID string, resp contract.ProvisionResponse)
	minted   int
}

func (k *keyedNAS) Provision(ctx context.Context, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	resp, err := k.fakeNAS.Provision(ctx, req)
	if err != nil {
		return resp, err
	}
	k.mu.Lock()
	k.asked = append(k.asked, req.JobID+":"+req.Delivery)
	a := k.arms[req.JobID]
	a.Delivery = ""
	switch {
	case req.Delivery == contract.DeliveryDirect && k.grant:
		key, ok := k.keys[req.JobID]
		if !ok || k.rekey[req.JobID] {
			k.minted++
			secret := make([]byte, contract.CronKeyBytes)
			secret[0] = byte(k.minted)
			key = contract.ProvisionResponse{CronKeyID: fmt.Sprintf("ck_%s_%d", req.JobID, k.minted), CronKey: base64.RawURLEncoding.EncodeToString(secret)}
			k.keys[req.JobID] = key
			delete(k.rekey, req.JobID)
		}
		a.Delivery = contract.DeliveryDirect
		resp.Delivery, resp.CronKeyID, resp.CronKey = contract.DeliveryDirect, key.CronKeyID, key.CronKey
	case req.Delivery == contract.DeliveryDirect:
		resp.Delivery = contract.DeliveryNAS
		delete(k.keys, req.JobID)
	default:
		delete(k.keys, req.JobID)
	}
	k.arms[req.JobID] = a
	hook := k.onAnswer
	k.mu.Unlock()
	if hook != nil {
		hook(req.JobID, resp)
	}
	return resp, nil
}

func (k *keyedNAS) Cancel(ctx context.Context, jobID string) error {
	if err := k.fakeNAS.Cancel(ctx, jobID); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.keys, jobID)
	k.mu.Unlock()
	return nil
}

func (k *keyedNAS) key(jobID string) contract.ProvisionResponse {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[jobID]
}

func (k *keyedNAS) takeAsked() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := strings.Join(k.asked, ",")
	k.asked = nil
	return out
}

// setupDirect is setup with a keyed NAS and a reconciler asking for
// delivery.
func setupDirect(t *testing.T, delivery string, grant bool) (*bundle, *keyedNAS, *cronkeys.Store) {
	t.Helper()
	b := setup(t, false)
	k := &keyedNAS{fakeNAS: b.nas, grant: grant, keys: map[string]contract.ProvisionResponse{}, rekey: map[string]bool{}}
	b.rec = newDirectReconciler(t, b, k, delivery)
	return b, k, b.rec.Keys()
}

func newDirectReconciler(t *testing.T, b *bundle, nas provider.NAS, delivery string) *provider.Reconciler {
	t.Helper()
	rec, err := provider.NewReconciler(provider.ReconcilerConfig{
		Source: b.rt, NAS: nas, CallbackURL: callback, Home: b.home, Delivery: delivery,
		Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestReconcileDirectStoresKeys: a direct provision's key is in the key
// store when the reconcile returns, the next slot keeps it, and a cancel
// drops it at once.
func TestReconcileDirectStoresKeys(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct" {
		t.Fatalf("provisions %q", got)
	}
	key := nas.key("a")
	if _, through, ok := keys.CronKey(context.Background(), "a", key.CronKeyID); !ok || !through.IsZero() || !keys.Direct("a") {
		t.Fatal("the answer's key is not the job's current key")
	}
	st, err := provider.ReadState(b.home)
	if err != nil || len(st.Armed) != 1 || st.Armed[0].Delivery != contract.DeliveryDirect {
		t.Fatalf("state armed %+v (%v)", st.Armed, err)
	}
	// In sync: nothing is provisioned again.
	b.reconcile(t)
	if got := nas.takeAsked(); got != "" {
		t.Fatalf("an unchanged direct arm was provisioned again: %q", got)
	}
	// Pausing the job cancels it: its keys go.
	if _, err := b.rt.Pause(context.Background(), "a", "test"); err != nil {
		t.Fatal(err)
	}
	b.reconcile(t)
	if keys.HasKeys("a") {
		t.Fatal("the cancelled job's keys were kept")
	}
}

// TestReconcileDirectKeyLostIsFetchedAgain: NAS holds a direct arm the
// agent has no key for (it died between NAS's answer and writing it): the
// reconcile provisions it again and stores the key NAS returns.
func TestReconcileDirectKeyLostIsFetchedAgain(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	nas.takeAsked()
	if err := keys.Drop(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct" {
		t.Fatalf("provisions %q, want the lost key asked for again", got)
	}
	if _, _, ok := keys.CronKey(context.Background(), "a", nas.key("a").CronKeyID); !ok {
		t.Fatal("the key is still missing")
	}
}

// TestReconcileDirectRefused: NAS answers a direct provision with mediated
// delivery: the job has no current key and is not asked again while its
// arm is unchanged.
func TestReconcileDirectRefused(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, contract.DeliveryDirect, false)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct" {
		t.Fatalf("provisions %q, want one", got)
	}
	if keys.Direct("a") {
		t.Fatal("a refused job has a current key")
	}
}

// TestReconcileDeliverySwitch: an agent that turns direct delivery on
// arms its mediated fires again for direct delivery, and one that turns it
// off arms them again mediated, retiring the key (valid through its slot).
func TestReconcileDeliverySwitch(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, "", true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:" {
		t.Fatalf("mediated provision %q", got)
	}
	b.rec = newDirectReconciler(t, b, nas, contract.DeliveryDirect)
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct" || !(keys.Delivery("a") == cronkeys.Direct) {
		t.Fatalf("switching to direct: provisions %q, direct %v", got, (keys.Delivery("a") == cronkeys.Direct))
	}
	key := nas.key("a")
	b.rec = newDirectReconciler(t, b, nas, contract.DeliveryNAS)
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:" || (keys.Delivery("a") == cronkeys.Direct) {
		t.Fatalf("switching back: provisions %q, direct %v", got, (keys.Delivery("a") == cronkeys.Direct))
	}
	if _, through, ok := keys.CronKey(context.Background(), "a", key.CronKeyID); !ok || !through.Equal(b.next(t, "a")) {
		t.Fatalf("the old key is not retired through the armed slot: %v %v", ok, through)
	}
	b.reconcile(t)
	if got := nas.takeAsked(); got != "" {
		t.Fatalf("provisions %q after the switch", got)
	}
}

// TestReconcileRekey: after Rekey every direct job is provisioned again,
// though armed unchanged, and keeps its old key for the slot armed under
// it.
func TestReconcileRekey(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	b.add(t, "b", "every 2h")
	b.reconcile(t)
	nas.takeAsked()
	oldA := nas.key("a")
	nas.set(func(*fakeNAS) { nas.rekey["a"], nas.rekey["b"] = true, true })
	b.rec.Rekey()
	if b.rec.InSync() {
		t.Fatal("in sync with a re-key pending")
	}
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct,b:direct" {
		t.Fatalf("re-key provisions %q", got)
	}
	if nas.key("a").CronKeyID == oldA.CronKeyID {
		t.Fatal("NAS did not re-key")
	}
	ctx := context.Background()
	if _, _, ok := keys.CronKey(ctx, "a", nas.key("a").CronKeyID); !ok {
		t.Fatal("the new key is not stored")
	}
	if _, through, ok := keys.CronKey(ctx, "a", oldA.CronKeyID); !ok || !through.Equal(b.next(t, "a")) {
		t.Fatalf("the old key does not cover the armed slot: %v %v", ok, through)
	}
	b.reconcile(t)
	if got := nas.takeAsked(); got != "" {
		t.Fatalf("a second reconcile re-keyed again: %q", got)
	}
}

// TestReconcileRekeyRetriedAfterFailure: a re-key whose provision failed
// is done again by the next reconcile.
func TestReconcileRekeyRetriedAfterFailure(t *testing.T) {
	t.Parallel()
	b, nas, _ := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	nas.takeAsked()
	nas.set(func(n *fakeNAS) { n.failNext["provision"] = 1 })
	b.rec.Rekey()
	if _, err := b.rec.Reconcile(context.Background()); err == nil {
		t.Fatal("the failed provision was not reported")
	}
	nas.takeAsked()
	b.reconcile(t)
	if got := nas.takeAsked(); got != "a:direct" {
		t.Fatalf("re-key after a failure: provisions %q", got)
	}
}

// TestReconcileDropsRemovedJobsKeys: a removed job's keys go at the next
// reconcile.
func TestReconcileDropsRemovedJobsKeys(t *testing.T) {
	t.Parallel()
	b, _, keys := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	b.reconcile(t)
	if err := b.rt.Remove(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	b.reconcile(t)
	if keys.HasKeys("a") {
		t.Fatal("the removed job's keys were kept")
	}
}

// TestReconcileKeyStoredBeforeFireFindsIt: a lookup of the new key made
// the moment NAS answers (a fire arriving at once) waits for the key to be
// written and finds it.
func TestReconcileKeyStoredBeforeFireFindsIt(t *testing.T) {
	t.Parallel()
	b, nas, keys := setupDirect(t, contract.DeliveryDirect, true)
	b.add(t, "a", "every 1h")
	found := make(chan bool, 1)
	nas.onAnswer = func(jobID string, resp contract.ProvisionResponse) {
		go func() {
			_, _, ok := keys.CronKey(context.Background(), jobID, resp.CronKeyID)
			found <- ok
		}()
		time.Sleep(50 * time.Millisecond) // the fire is looked up before the agent stores the key
	}
	b.reconcile(t)
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("a fire arriving as NAS answered did not find the key")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lookup never returned")
	}
}

// TestReconcilerDirectNeedsHome: direct delivery without a home for the
// keys, or an unknown mode, is refused.
func TestReconcilerDirectNeedsHome(t *testing.T) {
	t.Parallel()
	nas := newFakeNAS(time.Now)
	for _, cfg := range []provider.ReconcilerConfig{
		{NAS: nas, CallbackURL: callback, Delivery: contract.DeliveryDirect},
		{NAS: nas, CallbackURL: callback, Delivery: "pigeon", Home: t.TempDir()},
	} {
		b := setup(t, false)
		cfg.Source = b.rt
		if _, err := provider.NewReconciler(cfg); err == nil {
			t.Fatalf("config %+v accepted", cfg)
		}
	}
}
