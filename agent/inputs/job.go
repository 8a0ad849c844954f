package inputs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"time"

	"github.com/chronoscron/chronos/agent/job"
)

// JobOutputs finds the output file of a job's latest successful run that
// started after since; found is false when there is none.
type JobOutputs interface {
	LatestSuccessOutput(ctx context.Context, jobID string, since time.Time) (path string, found bool, err error)
}

// JobResolver reads job://ID?output_as_lines: the output of job ID's latest
// successful run within the window (query window=DURATION, else any age),
// one item per line. Only jobs of the same agent can be read.
type JobResolver struct {
	Jobs JobOutputs
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Check validates the job id and the query.
func (r *JobResolver) Check(_ context.Context, u *url.URL) error {
	if err := job.ValidID(u.Host); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, u, err)
	}
	q := u.Query()
	if !q.Has("output_as_lines") {
		return fmt.Errorf("%w: %s: a job input reads output_as_lines (job://ID?output_as_lines)", ErrInvalid, u)
	}
	for k := range q {
		if k != "output_as_lines" && k != "window" {
			return fmt.Errorf("%w: %s: unknown parameter %q (want output_as_lines, window)", ErrInvalid, u, k)
		}
	}
	if w := q.Get("window"); w != "" {
		if d, err := time.ParseDuration(w); err != nil || d <= 0 {
			return fmt.Errorf("%w: %s: window %q must be a positive duration", ErrInvalid, u, w)
		}
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("%w: %s: a job input has no path", ErrInvalid, u)
	}
	return nil
}

// Resolve reads the output's lines.
func (r *JobResolver) Resolve(ctx context.Context, u *url.URL) ([]string, error) {
	if r.Jobs == nil {
		return nil, fmt.Errorf("inputs: %s: no job outputs to read", u)
	}
	var since time.Time
	if w := u.Query().Get("window"); w != "" {
		d, _ := time.ParseDuration(w)
		now := time.Now
		if r.Now != nil {
			now = r.Now
		}
		since = now().Add(-d)
	}
	path, ok, err := r.Jobs.LatestSuccessOutput(ctx, u.Host, since)
	if err != nil {
		return nil, fmt.Errorf("inputs: job %s: %w", u.Host, err)
	}
	if !ok {
		return nil, fmt.Errorf("inputs: job %s has no successful run with output in the window", u.Host)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Lines(nil), nil // it printed nothing
	}
	if err != nil {
		return nil, fmt.Errorf("inputs: job %s: %w", u.Host, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("inputs: job %s: %w", u.Host, err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("inputs: job %s: output larger than %d bytes", u.Host, MaxBytes)
	}
	return Lines(b), nil
}
