package agent

import (
	"fmt"
	"strings"

	"github.com/chronoscron/chronos/agent/runner"
)

// PayloadSpec is a payload as a person types it: a command (one argument
// runs with "sh -c", several run directly) with its environment and
// directory, or an HTTP request.
type PayloadSpec struct {
	// Command is the command and its arguments; empty for an HTTP request.
	Command []string
	// Env holds KEY=VALUE pairs added to a command's environment; Dir is its
	// working directory.
	Env []string
	Dir string
	// HTTPURL makes the payload an HTTP request to this URL, with Method,
	// Headers ("Name: value"), Body, Accept (statuses that count as success)
	// and FollowRedirects.
	HTTPURL         string
	Method          string
	Headers         []string
	Body            string
	Accept          []int
	FollowRedirects bool
}

// Payload builds the payload. Errors wrap ErrInvalidJob.
func (s PayloadSpec) Payload() (runner.Payload, error) {
	switch {
	case len(s.Command) > 0 && s.HTTPURL != "":
		return runner.Payload{}, fmt.Errorf("%w: give either a command or an HTTP URL, not both", ErrInvalidJob)
	case len(s.Command) == 0 && s.HTTPURL == "":
		return runner.Payload{}, fmt.Errorf("%w: give a command or an HTTP URL", ErrInvalidJob)
	case s.HTTPURL != "" && (len(s.Env) > 0 || s.Dir != ""):
		return runner.Payload{}, fmt.Errorf("%w: an environment and a directory apply to commands, not to HTTP requests", ErrInvalidJob)
	case s.HTTPURL == "" && (s.Method != "" || len(s.Headers) > 0 || s.Body != "" || len(s.Accept) > 0 || s.FollowRedirects):
		return runner.Payload{}, fmt.Errorf("%w: HTTP settings need an HTTP URL", ErrInvalidJob)
	}
	if s.HTTPURL != "" {
		h := &runner.HTTP{URL: s.HTTPURL, Method: s.Method, Body: s.Body, Accept: s.Accept, FollowRedirects: s.FollowRedirects}
		var err error
		if h.Headers, err = pairs(s.Headers, ":", "header %q is not 'Name: value'"); err != nil {
			return runner.Payload{}, err
		}
		return runner.Payload{Kind: runner.KindHTTP, HTTP: h}, nil
	}
	sh := &runner.Shell{Dir: s.Dir}
	if len(s.Command) == 1 {
		sh.Command = s.Command[0]
	} else {
		sh.Argv = s.Command
	}
	var err error
	if sh.Env, err = pairs(s.Env, "=", "environment %q is not KEY=VALUE"); err != nil {
		return runner.Payload{}, err
	}
	return runner.Payload{Kind: runner.KindShell, Shell: sh}, nil
}

// pairs splits each item at sep into a map (nil when there is none).
func pairs(items []string, sep, bad string) (map[string]string, error) {
	var m map[string]string
	for _, kv := range items {
		k, v, ok := strings.Cut(kv, sep)
		if sep == ":" {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		}
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%w: "+bad, ErrInvalidJob, kv)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}
