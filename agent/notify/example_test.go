package notify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/agent/notify"
)

// A job that fails three times with notify_after 2 and then succeeds: the
// run path plans each run's notifications, makes them owed in the outbox,
// and a Notifier delivers them to a file target.
func Example() {
	home, _ := os.MkdirTemp("", "notify-example")
	defer os.RemoveAll(home)
	alerts := filepath.Join(home, "alerts.jsonl")
	policy := notify.Policy{
		Targets:     []notify.Target{{Kind: notify.KindFile, Path: alerts}},
		NotifyAfter: 2,
	}
	box, _ := notify.OpenFileOutbox(filepath.Join(home, "notify"), notify.FileOptions{})
	defer box.Close()
	ctx := context.Background()
	var streak notify.Streak
	start := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for i, status := range []string{"failed", "failed", "failed", "succeeded"} {
		var rows []notify.Notification
		streak, rows = notify.Plan(policy, streak, notify.Run{
			JobID: "backup", RunID: fmt.Sprintf("run-%d", i), Status: status,
			Slot: start.Add(time.Duration(i) * time.Hour), Ended: start.Add(time.Duration(i)*time.Hour + time.Minute),
		})
		box.Add(ctx, rows...)
	}
	n := notify.New(box, notify.Senders{File: notify.FileSender{}}, notify.Options{})
	n.Drain(ctx)

	f, _ := os.Open(alerts)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var b notify.Body
		json.Unmarshal(sc.Bytes(), &b)
		fmt.Println(b.Event, b.RunID, b.ConsecutiveFailures)
	}
	// Output:
	// failed run-1 2
	// recovered run-3 3
}
