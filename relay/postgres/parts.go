package postgres

// The parts of an Engine, each on the shared core.
type (
	// queue keeps armed rows, claims and leases (relay.Armed but the
	// failed-fire feed, relay.Queue but Wake, Stats); acks group-commits
	// its acks (ack.go).
	queue struct {
		*core
		acks group[ackItem]
	}
	// flows keeps agents' flow control (relay.Flows).
	flows struct{ *core }
	// deadLetters keeps the dead letter and the failed-fire feed
	// (relay.DeadLetters, ListFailed, AckFailed).
	deadLetters struct{ *core }
	// records keeps last fires and instances (relay.LastFires,
	// relay.Instances).
	records struct{ *core }
	// control keeps small shared facts (relay.Control, relay.Census,
	// relay.DeliveryLookup, relay.StoreEpoch).
	control struct{ *core }
	// deliveryHistory keeps delivery history and beats (relay.History).
	deliveryHistory struct{ *core }
)
