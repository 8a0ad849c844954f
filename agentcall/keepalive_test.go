package agentcall_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
)

// closingAgent answers the first request of each connection (keeping it
// alive) and closes a connection when a second request comes on it, as an
// agent whose idle timeout ends a connection just as NAS reuses it.
func closingAgent(t *testing.T) (url string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if n > 0 {
						return // closed under the reused request
					}
					body := `{"status":"accepted","job_id":"j"}`
					_, _ = io.WriteString(c, "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: "+
						itoa(len(body))+"\r\n\r\n"+body)
				}
			}(c)
		}
	}()
	return "http://" + ln.Addr().String() + "/api/cron/fire", conns
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for n >= 10 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	b[i] = byte('0' + n)
	return string(b[i:])
}

// TestFireSurvivesAConnectionClosedAsItIsReused: a fire whose kept-alive
// connection the agent closed is sent again on a new one and delivered,
// not failed as "agent unreachable".
func TestFireSurvivesAConnectionClosedAsItIsReused(t *testing.T) {
	t.Parallel()
	url, conns := closingAgent(t)
	c := agentcall.NewCaller(agentcall.Policy{AllowPrivate: true}, 5*time.Second)
	defer c.CloseIdle()
	for i := range 3 {
		res := c.Fire(context.Background(), url, "token", []byte(`{"job_id":"j"}`))
		if res.Outcome != agentcall.OutcomeDelivered {
			t.Fatalf("fire %d: %+v, want delivered", i+1, res)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (each reuse closed, each fire sent again on a new one)", n)
	}
}

// TestUnreachableReasonNamesTheNetworkError: a call that got no answer says
// which network error ended it.
func TestUnreachableReasonNamesTheNetworkError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(c).ReadString('\n')
			c.Close() // closed on a fresh connection: nothing to retry on
		}
	}()
	defer ln.Close()
	c := agentcall.NewCaller(agentcall.Policy{AllowPrivate: true}, 5*time.Second)
	res := c.Fire(context.Background(), "http://"+ln.Addr().String()+"/api/cron/fire", "token", []byte(`{}`))
	if res.Outcome != agentcall.OutcomeRetry || !strings.HasPrefix(res.Reason, "agent unreachable: ") || !strings.Contains(res.Reason, "EOF") ||
		strings.Contains(res.Reason, ln.Addr().String()) {
		t.Fatalf("result %+v, want a retry whose reason names the EOF, not the URL", res)
	}
}
