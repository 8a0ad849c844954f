// Package operator is a client of NAS's operator routes: stopping and
// starting an agent instance, disabling and enabling an agent, cancelling
// every job of an agent, the dead
// letter (list, replay) and the jobs left without an armed fire. It also
// finds NAS the way the operator commands do: flags, then NAS's config file,
// then the environment, and renders the answers as the commands print them.
package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// Client calls NAS's operator routes with the operator token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the NAS whose internal listener is at baseURL (an
// http or https URL).
func New(baseURL, token string) (*Client, error) {
	if err := checkURL(baseURL); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("the operator token is empty")
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// checkURL refuses a NAS URL that is not an absolute http(s) URL.
func checkURL(base string) error {
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--nas-url %q is not an http(s) URL", base)
	}
	return nil
}

// BaseURL is the NAS URL the client calls.
func (c *Client) BaseURL() string { return c.base }

// Token is the operator token the client sends.
func (c *Client) Token() string { return c.token }

// Source says where to find NAS and the operator token: URL and Token (the
// flags) first, then NAS's config file ConfigFile (read with LoadConfig, as
// NAS reads it), then the environment (CHRONOS_NAS_URL;
// CHRONOS_OPERATOR_TOKEN, then NAS's own CHRONOS_NAS_OPERATOR_TOKEN).
type Source struct {
	URL, Token, ConfigFile string
	// LoadConfig reads NAS's config file; required with ConfigFile.
	LoadConfig func(path string) (nas.Config, error)
	// Getenv reads the environment.
	Getenv func(string) (string, bool)
}

// Resolve returns a client of the NAS s names. Every error it returns is the
// operator's to fix (a missing or bad setting).
func Resolve(s Source) (*Client, error) {
	env := func(names ...string) string {
		for _, n := range names {
			if v, ok := s.Getenv(n); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	base, token := s.URL, s.Token
	if s.ConfigFile != "" && (base == "" || token == "") {
		cfg, err := s.LoadConfig(s.ConfigFile)
		if err != nil {
			return nil, err
		}
		base = cmp.Or(base, cfg.Relay.NASURL)
		token = cmp.Or(token, cfg.OperatorToken)
	}
	base = cmp.Or(base, env("CHRONOS_NAS_URL"))
	token = cmp.Or(token, env("CHRONOS_OPERATOR_TOKEN", "CHRONOS_NAS_OPERATOR_TOKEN"))
	if base == "" {
		return nil, errors.New("--nas-url, CHRONOS_NAS_URL or --config is required")
	}
	if err := checkURL(base); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("--operator-token, CHRONOS_OPERATOR_TOKEN or a --config with operator_token is required")
	}
	return New(base, token)
}

// DeadLetters lists the dead letter, newest first, every page of it; agent
// "" lists every agent's entries.
func (c *Client) DeadLetters(ctx context.Context, agent string) ([]contract.DeadLetter, error) {
	all := []contract.DeadLetter{}
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
		if err := c.call(ctx, http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Entries...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

// Replay delivers dead-lettered fires again. A request NAS refuses as
// invalid comes back as a *contract.Error with CodeInvalidRequest.
func (c *Client) Replay(ctx context.Context, req contract.DLQReplayRequest) (contract.DLQReplayResponse, error) {
	var resp contract.DLQReplayResponse
	err := c.call(ctx, http.MethodPost, contract.PathOperatorDLQReplay, req, &resp)
	return resp, err
}

// Unarmed lists the jobs left without an armed fire, oldest first; agent ""
// lists every agent's.
func (c *Client) Unarmed(ctx context.Context, agent string) (contract.UnarmedResponse, error) {
	path := contract.PathOperatorUnarmed
	if agent != "" {
		path += "?" + url.Values{"agent": {agent}}.Encode()
	}
	var resp contract.UnarmedResponse
	err := c.call(ctx, http.MethodGet, path, nil, &resp)
	return resp, err
}

// StopInstance stops an agent instance: NAS drops its fires, not retrying
// them, until StartInstance.
func (c *Client) StopInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return c.instanceState(ctx, contract.PathOperatorInstanceStop, instanceID)
}

// StartInstance starts a stopped agent instance again; NAS then asks its
// agent to reconcile.
func (c *Client) StartInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return c.instanceState(ctx, contract.PathOperatorInstanceStart, instanceID)
}

func (c *Client) instanceState(ctx context.Context, route, instanceID string) (contract.InstanceStateResponse, error) {
	var resp contract.InstanceStateResponse
	err := c.call(ctx, http.MethodPost, pathWith(route, "{instance_id}", instanceID), nil, &resp)
	return resp, err
}

// DisableAgent disables an agent at NAS (the kill switch): its fires are
// held, none delivered and none lost, and its calls refused, until
// EnableAgent.
func (c *Client) DisableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return c.agentState(ctx, contract.PathOperatorAgentDisable, agentID)
}

// EnableAgent enables a disabled agent again: its held fires go out (those
// past relay.misfire_grace to the dead letter). NAS refuses it (409
// conflict) for an agent the agents file disables.
func (c *Client) EnableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return c.agentState(ctx, contract.PathOperatorAgentEnable, agentID)
}

func (c *Client) agentState(ctx context.Context, route, agentID string) (contract.AgentStateResponse, error) {
	var resp contract.AgentStateResponse
	err := c.call(ctx, http.MethodPost, pathWith(route, "{agent_id}", agentID), nil, &resp)
	return resp, err
}

// RekeyAgent retires the cron keys of an agent's direct jobs: NAS asks
// the agent to reconcile, and each job's next provision gets a new key.
func (c *Client) RekeyAgent(ctx context.Context, agentID string) (contract.AgentRekeyResponse, error) {
	var resp contract.AgentRekeyResponse
	err := c.call(ctx, http.MethodPost, pathWith(contract.PathOperatorAgentRekey, "{agent_id}", agentID), nil, &resp)
	return resp, err
}

// CancelAll cancels every armed fire of an agent and says how many.
func (c *Client) CancelAll(ctx context.Context, agentID string) (contract.CancelAllResponse, error) {
	var resp contract.CancelAllResponse
	err := c.call(ctx, http.MethodPost, pathWith(contract.PathOperatorAgentCancel, "{agent_id}", agentID), nil, &resp)
	return resp, err
}

// pathWith fills the parameter param of route with v, escaped as one path
// segment.
func pathWith(route, param, v string) string {
	return strings.Replace(route, param, url.PathEscape(v), 1)
}

// call sends one operator request and decodes a 200 answer into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	status, data, err := contract.Call{Method: method, URL: c.base + path, Token: c.token, Body: in}.Send(ctx, c.http)
	if err != nil {
		return fmt.Errorf("operator call: %w", err)
	}
	if status != http.StatusOK {
		if e, ok := contract.ErrorBody(data); ok {
			return fmt.Errorf("nas answered %d: %w", status, e)
		}
		return fmt.Errorf("nas answered %d", status)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("operator call: decoding the answer: %w", err)
	}
	return nil
}
