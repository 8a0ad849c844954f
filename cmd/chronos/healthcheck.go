package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckMaxTimeout bounds --timeout: a container runtime's healthcheck
// has a timeout of its own, and a probe that waits longer helps nobody.
const healthcheckMaxTimeout = 5 * time.Minute

// newHealthcheckCmd returns `chronos healthcheck URL`: one GET of URL, exit
// 0 on a 2xx answer within the timeout and 1 otherwise. It is the image's
// healthcheck (the image has no shell and no wget), usable as a systemd
// ExecStartPost or from any script.
func newHealthcheckCmd() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck URL",
		Short: "GET an http(s) URL: exit 0 on a 2xx answer within the timeout, 1 otherwise",
		Long: `Healthcheck sends one GET to URL (http or https, with a host) and exits 0 when
the answer is 2xx within --timeout, 1 otherwise (any other status, a network
error, the timeout), saying which on stderr. A URL that is not an absolute
http(s) URL, or a timeout out of range, is bad usage (exit 2). Redirects are
not followed: a health endpoint answers itself.

It is the container image's healthcheck, where there is no shell and no wget.`,
		Example: "  chronos healthcheck http://127.0.0.1:8080/readyz\n" +
			"  chronos healthcheck --timeout 2s http://127.0.0.1:9092/healthz",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 || timeout > healthcheckMaxTimeout {
				return usagef("--timeout %s: want more than 0 and at most %s", timeout, healthcheckMaxTimeout)
			}
			u, err := healthcheckURL(args[0])
			if err != nil {
				return asUsage(err)
			}
			status, err := probe(cmd.Context(), u, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", u.Redacted(), status)
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long the whole request may take")
	return c
}

// healthcheckURL parses raw as an absolute http or https URL with a host.
func healthcheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("URL %q: want an http:// or https:// URL: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("URL %q: no host", raw)
	}
	return u, nil
}

// probe GETs u within timeout and returns the answer's status line when it
// is 2xx; any other answer, a network error or the timeout is an error
// saying which.
func probe(ctx context.Context, u *url.URL, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", "chronos-healthcheck/"+version)
	client := &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("%s: no answer within %s", u.Redacted(), timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once
		}
		return "", fmt.Errorf("%s: unhealthy: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	elapsed := time.Since(start).Round(time.Millisecond)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("%s: unhealthy: %s after %s", u.Redacted(), resp.Status, elapsed)
		if b := strings.Join(strings.Fields(string(body)), " "); b != "" {
			msg += ": " + b
		}
		return "", errors.New(msg)
	}
	return fmt.Sprintf("%s in %s", resp.Status, elapsed), nil
}
