package localapi

import (
	"maps"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
)

// Env values in answers.
const (
	// RedactedValue stands for each value of a shell payload's env in an
	// answer that does not reveal them: the names are listed, the values
	// are not.
	RedactedValue = "[redacted]"
	// QueryReveal is the query parameter that asks an answer carrying jobs
	// for the values their answers otherwise redact: reveal=env.
	QueryReveal = "reveal"
	// RevealEnv is the value of QueryReveal that reveals env values.
	RevealEnv = "env"
)

// revealEnv reads the reveal query parameter: env asks for env values
// (only an authenticated caller reaches a route that reads it); any other
// value is a 400.
func revealEnv(c echo.Context) (bool, error) {
	switch v := c.QueryParam(QueryReveal); v {
	case "":
		return false, nil
	case RevealEnv:
		return true, nil
	default:
		return false, contract.BadRequest(contract.CodeInvalidRequest, "%s %q: the only value is %q", QueryReveal, v, RevealEnv)
	}
}

// redacted returns in with each env value of its shell payload replaced by
// RedactedValue and EnvRedacted set; in itself (which shares the stored
// job's maps) is left alone. A job without env is returned as it is.
func redacted(in JobInfo) JobInfo {
	sh := in.Payload.Shell
	if sh == nil || len(sh.Env) == 0 {
		return in
	}
	cp := *sh
	cp.Env = make(map[string]string, len(sh.Env))
	for k := range sh.Env {
		cp.Env[k] = RedactedValue
	}
	in.Payload.Shell = &cp
	in.EnvRedacted = true
	return in
}

// checkNoPlaceholder refuses a payload whose env holds RedactedValue: it
// was read from a redacted answer and sent back, and would replace the
// secret with the placeholder.
func checkNoPlaceholder(p *runner.Payload) error {
	if p == nil || p.Shell == nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(p.Shell.Env)) {
		if p.Shell.Env[k] == RedactedValue {
			return contract.Errorf(http.StatusUnprocessableEntity, CodeInvalidJob,
				"env %s is %q, the placeholder of a redacted value: send the value itself (read the job with ?%s=%s)",
				k, RedactedValue, QueryReveal, RevealEnv)
		}
	}
	return nil
}
