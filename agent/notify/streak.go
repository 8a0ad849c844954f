package notify

// Streak is a job's failure streak, kept with the job and updated in the
// same write as the run's final state.
type Streak struct {
	// Failures counts consecutive failed runs.
	Failures int `json:"failures,omitempty" yaml:"failures,omitempty"`
	// Alerted says a failed alert was emitted for the current streak.
	Alerted bool `json:"alerted,omitempty" yaml:"alerted,omitempty"`
}

// Next returns the streak after a run ending in outcome, and the events the
// run emits, in order:
//   - succeeded: succeeded, then recovered once if the streak had alerted;
//     the streak resets;
//   - partial (a fanout within its tolerance): a success, so as
//     succeeded, with partial between succeeded and recovered;
//   - failed: the streak grows; failed when it reaches notify_after, and
//     again every renotify_every further failures;
//   - missed and interrupted: emitted as themselves; the streak is left
//     as it was (the job did not run to an answer).
//
// Any other outcome emits nothing and changes nothing.
func (s Streak) Next(p Policy, outcome Event) (Streak, []Event) {
	switch outcome {
	case EventSucceeded, EventPartial:
		events := []Event{EventSucceeded}
		if outcome == EventPartial {
			events = append(events, EventPartial)
		}
		if s.Alerted {
			events = append(events, EventRecovered)
		}
		return Streak{}, events
	case EventFailed:
		s.Failures++
		n := p.Threshold()
		switch {
		case !s.Alerted && s.Failures >= n:
			// >= rather than ==: notify_after may have been lowered
			// during a streak.
			s.Alerted = true
			return s, []Event{EventFailed}
		case s.Alerted && p.RenotifyEvery > 0 && s.Failures > n && (s.Failures-n)%p.RenotifyEvery == 0:
			return s, []Event{EventFailed}
		}
		return s, nil
	case EventMissed, EventInterrupted:
		return s, []Event{outcome}
	}
	return s, nil
}
