package notify

import (
	"context"
	"errors"
	"time"
)

// Notification is one owed delivery: an outbox row's payload.
type Notification struct {
	// ID is stable across retries and replays (see NotificationID).
	ID string `json:"id"`
	// Target is where it goes.
	Target Target `json:"target"`
	// Body is what is sent.
	Body Body `json:"body"`
	// CreatedAt is when it became owed; the give-up time counts from it.
	CreatedAt time.Time `json:"created_at"`
}

// State is where a notification is in the outbox.
type State string

// Outbox states. pending and sending are open; sent and dead are final.
const (
	StatePending State = "pending"
	StateSending State = "sending"
	StateSent    State = "sent"
	StateDead    State = "dead"
)

// Row is a notification with its delivery state.
type Row struct {
	Notification
	State State `json:"state"`
	// Attempts counts delivery attempts made.
	Attempts int `json:"attempts"`
	// NextAt is when the next attempt is due (zero: now).
	NextAt time.Time `json:"next_at,omitzero"`
	// Owner, Token and LeaseUntil are the claim of a sending row. Token
	// grows with every claim: it fences a late answer from an owner whose
	// lease ran out.
	Owner      string    `json:"owner,omitempty"`
	Token      uint64    `json:"token,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// LastStatus and LastError describe the last failed attempt.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// Since starts the current delivery effort (CreatedAt, or the last
	// replay): the give-up time counts from it.
	Since time.Time `json:"since,omitzero"`
	// UpdatedAt is when the row last changed; FinishedAt when it became
	// sent or dead.
	UpdatedAt  time.Time `json:"updated_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// Due reports whether the row may be claimed at now: open, due, and not
// under a live lease.
func (r Row) Due(now time.Time) bool {
	switch r.State {
	case StatePending:
		return !now.Before(r.NextAt)
	case StateSending:
		return !now.Before(r.LeaseUntil)
	}
	return false
}

// start returns when the current delivery effort began.
func (r Row) start() time.Time {
	if r.Since.IsZero() {
		return r.CreatedAt
	}
	return r.Since
}

// Attempt is what the notifier records after one delivery attempt.
type Attempt struct {
	// State is sent, dead, or pending (retry at NextAt).
	State  State
	NextAt time.Time
	Status int
	Error  string
	At     time.Time
}

// Outbox errors.
var (
	// ErrClaimed: another owner holds a live lease on the row.
	ErrClaimed = errors.New("notify: notification is claimed by another sender")
	// ErrFinished: the row is already sent or dead.
	ErrFinished = errors.New("notify: notification is already finished")
	// ErrNotDue: the row's next attempt is not due yet.
	ErrNotDue = errors.New("notify: notification is not due yet")
	// ErrStaleClaim: the claim was superseded (its lease ran out and
	// another sender claimed the row); the attempt is not recorded.
	ErrStaleClaim = errors.New("notify: claim is no longer current")
	// ErrNotFound: no row has that id.
	ErrNotFound = errors.New("notify: notification not found")
)

// Outbox is the durable store of owed notifications the Notifier drains.
type Outbox interface {
	// Pending returns the open rows (pending or sending).
	Pending(ctx context.Context) ([]Row, error)
	// Claim takes the row for owner until now+lease and returns it with a
	// new token. It fails with ErrClaimed, ErrFinished, ErrNotDue or
	// ErrNotFound.
	Claim(ctx context.Context, id, owner string, lease time.Duration) (Row, error)
	// Done records the attempt made under claim; ErrStaleClaim if the
	// claim is no longer current.
	Done(ctx context.Context, claim Row, a Attempt) error
}
