package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/provider"
)

// uiFires is how many recent fires GET /api/status reports.
const uiFires = 10

// localUI is the running local API and dashboard.
type localUI struct {
	api  *localapi.Server
	http *http.Server
	url  string
	done chan struct{}
}

// startUI serves the local API and dashboard on ui_listen (or
// o.UIListener) unless it is off. A missing or empty ui_token_file is an
// error; an address that cannot be bound (taken by another agent) is
// logged and the agent runs without it.
func (s *sidecar) startUI() (*localUI, error) {
	cfg := s.o.Config
	if s.o.UIListener == nil && !cfg.UIEnabled() {
		return nil, nil
	}
	token, err := localapi.EnsureToken(cfg.Home, cfg.UITokenFile)
	if err != nil {
		return nil, fmt.Errorf("agent: ui_token_file: %w", err)
	}
	ln := s.o.UIListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.UIListen); err != nil {
			s.log.Warn("the local API and dashboard are not served: ui_listen cannot be bound (set ui_listen to a free address, or off)",
				"ui_listen", cfg.UIListen, "error", err)
			return nil, nil
		}
	}
	hosts := uiHosts(cfg, ln.Addr())
	api, err := localapi.New(localapi.Options{Runtime: s.rt, Token: token, Hosts: hosts,
		Logger: s.log.With("component", "localapi"), Status: s.status})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	ui := &localUI{api: api, url: "http://" + ln.Addr().String(), done: make(chan struct{}),
		http: &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}}
	go func() {
		defer close(ui.done)
		if err := ui.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("local API stopped", "error", err)
		}
	}()
	s.log.Info("local API and dashboard", "url", ui.url, "hosts", hosts)
	return ui, nil
}

// uiHosts are the names a request's Host may carry besides localhost and
// the loopback addresses: the host of ui_listen and of the address
// listened on (unless it is every interface's), and ui_hosts.
func uiHosts(cfg provider.Config, addr net.Addr) []string {
	var hosts []string
	for _, a := range []string{cfg.UIListen, addr.String()} {
		host, _, err := net.SplitHostPort(strings.TrimSpace(a))
		if err != nil || host == "" {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		if !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	return append(hosts, cfg.UIHosts...)
}

// status is what GET /api/status answers: the report of `chronos agent
// status --json`.
func (s *sidecar) status(ctx context.Context) (any, error) {
	return Status(ctx, StatusOptions{Config: s.o.Config, Decision: s.o.Decision, Fires: uiFires})
}

// recordServing writes the home's serving record: the config and, while
// it serves, the local API.
func (s *sidecar) recordServing(ui *localUI) {
	rec := provider.Serving{Config: s.o.ConfigPath, PID: os.Getpid(), StartedAt: s.started}
	if ui != nil {
		rec.UI, rec.UITokenFile = ui.url, s.o.Config.UITokenFile
	}
	if err := provider.WriteServing(s.o.Config.Home, rec); err != nil {
		s.log.Warn("could not record which agent serves the home; job commands will not find it", "error", err)
	}
}

// stop ends the local API: event streams are cut, requests in progress
// finish (bounded by ctx).
func (ui *localUI) stop(ctx context.Context) {
	if ui == nil {
		return
	}
	ui.api.Close()
	_ = ui.http.Shutdown(ctx)
	<-ui.done
}
