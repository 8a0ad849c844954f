package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/contract"
)

// operatorClient calls NAS's operator routes.
type operatorClient struct {
	base  string
	token string
	http  *http.Client
}

// operatorFlags are the connection flags shared by the dlq commands.
type operatorFlags struct {
	nasURL, token, config string
	// getenv reads the environment; nil is os.LookupEnv.
	getenv func(string) (string, bool)
}

func (f *operatorFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.nasURL, "nas-url", "", "base URL of NAS's internal listener (env CHRONOS_NAS_URL)")
	c.Flags().StringVar(&f.token, "operator-token", "", "the operator token (env CHRONOS_OPERATOR_TOKEN or CHRONOS_NAS_OPERATOR_TOKEN)")
	c.Flags().StringVar(&f.config, "config", "", "NAS's config file: the URL and token default to its relay.nas_url and operator_token")
}

// client resolves the NAS URL and the operator token: --nas-url and
// --operator-token first, then NAS's config file given with --config (read
// as NAS reads it, environment included), then the environment
// (CHRONOS_NAS_URL; CHRONOS_OPERATOR_TOKEN, then NAS's own
// CHRONOS_NAS_OPERATOR_TOKEN).
func (f *operatorFlags) client() (*operatorClient, error) {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	env := func(names ...string) string {
		for _, n := range names {
			if v, ok := getenv(n); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	base, token := f.nasURL, f.token
	if f.config != "" && (base == "" || token == "") {
		cfg, err := loadNASConfig(f.config, getenv)
		if err != nil {
			return nil, asUsage(err)
		}
		if base == "" {
			base = cfg.Relay.NASURL
		}
		if token == "" {
			token = cfg.OperatorToken
		}
	}
	if base == "" {
		base = env("CHRONOS_NAS_URL")
	}
	if token == "" {
		token = env("CHRONOS_OPERATOR_TOKEN", nasEnvPrefix+"OPERATOR_TOKEN")
	}
	if base == "" {
		return nil, usagef("--nas-url, CHRONOS_NAS_URL or --config is required")
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--nas-url %q is not an http(s) URL", base)
	}
	if token == "" {
		return nil, usagef("--operator-token, CHRONOS_OPERATOR_TOKEN or a --config with operator_token is required")
	}
	return &operatorClient{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// call sends one operator request and decodes a 200 answer into out.
func (c *operatorClient) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("operator call: %w", err)
	}
	if in != nil {
		req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	}
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("operator call: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("operator call: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e contract.Error
		if json.Unmarshal(data, &e) == nil && e.Code != "" {
			return fmt.Errorf("nas answered %d: %w", resp.StatusCode, &e)
		}
		return fmt.Errorf("nas answered %d", resp.StatusCode)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("operator call: decoding the answer: %w", err)
	}
	return nil
}

func newDLQCmd() *cobra.Command {
	return groupCmd("dlq", "Inspect and replay the dead letter", newDLQListCmd(), newDLQReplayCmd())
}

func newDLQListCmd() *cobra.Command {
	var flags operatorFlags
	var agent string
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--agent A] [--json]",
		Short: "List dead-lettered fires, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oc, err := flags.client()
			if err != nil {
				return err
			}
			var all []contract.DeadLetter
			cursor := ""
			for {
				q := url.Values{}
				if agent != "" {
					q.Set("agent_id", agent)
				}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				path := contract.PathOperatorDLQ
				if len(q) > 0 {
					path += "?" + q.Encode()
				}
				var page contract.DLQListResponse
				if err := oc.call(cmd.Context(), http.MethodGet, path, nil, &page); err != nil {
					return fmt.Errorf("dlq list: %w", err)
				}
				all = append(all, page.Entries...)
				if page.NextCursor == nil || *page.NextCursor == "" {
					break
				}
				cursor = *page.NextCursor
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if all == nil {
					all = []contract.DeadLetter{}
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			if len(all) == 0 {
				fmt.Fprintln(out, "the dead letter is empty")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULE_ID\tAGENT\tJOB\tFIRE_AT\tATTEMPTS\tFAILED_AT\tREASON")
			for _, d := range all {
				// The reason quotes the agent's answer: escaped like all remote text.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", termSafeArgs([]any{d.ScheduleID, d.AgentID, d.JobID, d.FireAt.String(), d.Attempts, d.FailedAt.String(), d.Reason})...)
			}
			return tw.Flush()
		},
	}
	flags.register(c)
	c.Flags().StringVar(&agent, "agent", "", "only this agent's entries")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newDLQReplayCmd() *cobra.Command {
	var flags operatorFlags
	var agent string
	c := &cobra.Command{
		Use:   "replay [--agent A | SCHEDULE_ID...]",
		Short: "Deliver dead-lettered fires again (due now, attempts reset)",
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case agent != "" && len(args) > 0:
				return usagef("dlq replay: give --agent or schedule ids, not both")
			case agent == "" && len(args) == 0:
				return usagef("dlq replay: give --agent A or at least one schedule id")
			}
			oc, err := flags.client()
			if err != nil {
				return err
			}
			req := contract.DLQReplayRequest{AgentID: agent, ScheduleIDs: args}
			var resp contract.DLQReplayResponse
			if err := oc.call(cmd.Context(), http.MethodPost, contract.PathOperatorDLQReplay, req, &resp); err != nil {
				var ce *contract.Error
				if errors.As(err, &ce) && ce.Code == contract.CodeInvalidRequest {
					return asUsage(fmt.Errorf("dlq replay: %w", err))
				}
				return fmt.Errorf("dlq replay: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d\n", resp.Replayed)
			return nil
		},
	}
	flags.register(c)
	c.Flags().StringVar(&agent, "agent", "", "replay all of this agent's dead letters")
	return c
}
