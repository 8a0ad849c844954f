package operator

import (
	"fmt"
	"io"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/termtext"
)

// WriteDeadLetters writes the dead letter as a table, newest first as
// DeadLetters returns it, or says it is empty. The reason quotes the agent's
// answer: every cell is escaped for the terminal.
func WriteDeadLetters(w io.Writer, all []contract.DeadLetter) error {
	if len(all) == 0 {
		_, err := fmt.Fprintln(w, "the dead letter is empty")
		return err
	}
	rows := make([][]string, 0, len(all))
	for _, d := range all {
		rows = append(rows, []string{d.ScheduleID, d.AgentID, d.JobID, d.FireAt.String(), fmt.Sprint(d.Attempts), d.FailedAt.String(), d.Reason})
	}
	return termtext.Table(w, []string{"SCHEDULE_ID", "AGENT", "JOB", "FIRE_AT", "ATTEMPTS", "FAILED_AT", "REASON"}, rows)
}

// WriteUnarmed writes the jobs left without an armed fire as a table, with
// how long each has been unarmed at now, or says there is none; a truncated
// answer ends with a hint to narrow it.
func WriteUnarmed(w io.Writer, resp contract.UnarmedResponse, now time.Time) error {
	if len(resp.Unarmed) == 0 {
		_, err := fmt.Fprintf(w, "no job is left without an armed fire (unarmed_after %s)\n", resp.UnarmedAfter)
		return err
	}
	rows := make([][]string, 0, len(resp.Unarmed))
	for _, u := range resp.Unarmed {
		rows = append(rows, []string{u.AgentID, u.InstanceID, u.JobID, u.FireAt.String(), u.Outcome,
			now.Sub(u.OutcomeAt.Time).Round(time.Second).String(), u.Reason})
	}
	err := termtext.Table(w, []string{"AGENT", "INSTANCE", "JOB", "LAST_FIRE_AT", "OUTCOME", "UNARMED_FOR", "REASON"}, rows)
	if err != nil || !resp.Truncated {
		return err
	}
	_, err = fmt.Fprintf(w, "(more than %d; narrow with --agent)\n", len(resp.Unarmed))
	return err
}

// InstanceLine says in one line what the instance's state now is.
func InstanceLine(r contract.InstanceStateResponse) string {
	if r.Stopped {
		return fmt.Sprintf("instance %s stopped: its fires are dropped until it is started", termtext.Escape(r.InstanceID, termtext.EscapeNewlines))
	}
	return fmt.Sprintf("instance %s started: its agent is asked to reconcile", termtext.Escape(r.InstanceID, termtext.EscapeNewlines))
}

// RekeyLine says in one line what a re-key of an agent did.
func RekeyLine(r contract.AgentRekeyResponse) string {
	return fmt.Sprintf("agent %s re-keyed at %s: its direct jobs get new cron keys as it provisions them (it is asked to reconcile now)",
		termtext.Escape(r.AgentID, termtext.EscapeNewlines), r.RekeyedAt)
}

// AgentLine says in one line what the agent's state now is.
func AgentLine(r contract.AgentStateResponse) string {
	id := termtext.Escape(r.AgentID, termtext.EscapeNewlines)
	if r.Disabled {
		return fmt.Sprintf("agent %s disabled: NAS holds its fires and refuses its calls until it is enabled", id)
	}
	return fmt.Sprintf("agent %s enabled: its held fires go out (those past relay.misfire_grace as failed fires)", id)
}

// WriteReplay writes what a replay did: the count replayed, then a table of
// every entry with what happened to it (replayed, due now; or dropped, with
// the reason), and the ids another replay took meanwhile. Every cell is
// escaped for the terminal.
func WriteReplay(w io.Writer, r contract.DLQReplayResponse) error {
	if _, err := fmt.Fprintf(w, "replayed %d, dropped %d\n", r.Replayed, len(r.Dropped)); err != nil {
		return err
	}
	rows := make([][]string, 0, len(r.Entries)+len(r.Dropped)+len(r.Missing))
	for _, e := range r.Entries {
		rows = append(rows, []string{e.ScheduleID, e.AgentID, e.JobID, e.FireAt.String(), "replayed: due now"})
	}
	for _, d := range r.Dropped {
		rows = append(rows, []string{d.ScheduleID, d.AgentID, d.JobID, d.FireAt.String(), "dropped (" + d.Reason + "): " + d.Description})
	}
	for _, id := range r.Missing {
		rows = append(rows, []string{id, "", "", "", "not replayed: another replay took it meanwhile"})
	}
	if len(rows) == 0 {
		return nil
	}
	return termtext.Table(w, []string{"SCHEDULE_ID", "AGENT", "JOB", "FIRE_AT", "OUTCOME"}, rows)
}
