package contract_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

func TestCallSend(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, auth, ctype string
		body                      map[string]any
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"), ctype: r.Header.Get("Content-Type")}
		if r.ContentLength != 0 {
			_ = json.NewDecoder(r.Body).Decode(&s.body)
		}
		got <- s
		switch r.URL.Path {
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 100)))
		case "/refused":
			contract.WriteError(w, contract.Errorf(http.StatusConflict, contract.CodeInvalidRequest, "no"))
		default:
			contract.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	for _, tc := range []struct {
		name       string
		call       contract.Call
		wantSeen   seen
		wantStatus int
		wantBody   string
	}{
		{
			name:       "json body and token",
			call:       contract.Call{Method: http.MethodPost, URL: srv.URL + "/a", Token: "tok", Body: map[string]int{"n": 1}},
			wantSeen:   seen{method: "POST", path: "/a", auth: "Bearer tok", ctype: contract.MediaTypeJSON, body: map[string]any{"n": float64(1)}},
			wantStatus: http.StatusOK, wantBody: `{"ok":true}` + "\n",
		},
		{
			name:       "no body, no token",
			call:       contract.Call{Method: http.MethodGet, URL: srv.URL + "/b"},
			wantSeen:   seen{method: "GET", path: "/b"},
			wantStatus: http.StatusOK, wantBody: `{"ok":true}` + "\n",
		},
		{
			name:       "answer cut at the limit",
			call:       contract.Call{Method: http.MethodGet, URL: srv.URL + "/big", Limit: 10},
			wantSeen:   seen{method: "GET", path: "/big"},
			wantStatus: http.StatusOK, wantBody: strings.Repeat("x", 10),
		},
		{
			name:       "error answer",
			call:       contract.Call{Method: http.MethodDelete, URL: srv.URL + "/refused", Token: "t"},
			wantSeen:   seen{method: "DELETE", path: "/refused", auth: "Bearer t"},
			wantStatus: http.StatusConflict, wantBody: `{"error":"invalid_request","error_description":"no"}` + "\n",
		},
	} {
		status, body, err := tc.call.Send(ctx, srv.Client())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := <-got
		if s.method != tc.wantSeen.method || s.path != tc.wantSeen.path || s.auth != tc.wantSeen.auth || s.ctype != tc.wantSeen.ctype {
			t.Errorf("%s: server saw %+v, want %+v", tc.name, s, tc.wantSeen)
		}
		if len(tc.wantSeen.body) > 0 && s.body["n"] != tc.wantSeen.body["n"] {
			t.Errorf("%s: server read body %v, want %v", tc.name, s.body, tc.wantSeen.body)
		}
		if status != tc.wantStatus || string(body) != tc.wantBody {
			t.Errorf("%s: answer %d %q, want %d %q", tc.name, status, body, tc.wantStatus, tc.wantBody)
		}
	}
}

func TestCallSendFailures(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL
	srv.Close()
	if _, _, err := (contract.Call{Method: http.MethodGet, URL: url}).Send(context.Background(), http.DefaultClient); err == nil {
		t.Error("a call to a closed server did not fail")
	}
	_, _, err := contract.Call{Method: http.MethodPost, URL: url, Body: func() {}}.Send(context.Background(), http.DefaultClient)
	var ue *json.UnsupportedTypeError
	if !errors.As(err, &ue) {
		t.Errorf("a body that cannot be encoded: %v, want a json.UnsupportedTypeError", err)
	}
}

func TestErrorBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data     string
		wantOK   bool
		wantCode string
	}{
		{`{"error":"not_found","error_description":"gone"}`, true, contract.CodeNotFound},
		{`{"error_description":"no code"}`, false, ""},
		{`<html>bad gateway</html>`, false, ""},
		{``, false, ""},
	} {
		e, ok := contract.ErrorBody([]byte(tc.data))
		if ok != tc.wantOK || (ok && e.Code != tc.wantCode) {
			t.Errorf("ErrorBody(%q) = %v, %v; want ok %v code %q", tc.data, e, ok, tc.wantOK, tc.wantCode)
		}
	}
}
