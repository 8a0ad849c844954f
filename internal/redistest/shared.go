package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/internal/testserver"
)

// shared is the server shared by the tests of this binary.
var shared = &testserver.Shared{EnvURL: EnvURL, Start: startShared}

// startShared starts the shared server in a temporary directory of its own.
func startShared() (string, func(), error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return "", nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	s, err := startServer(Options{Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return s.URL(), func() {
		_ = s.Stop()
		_ = os.RemoveAll(dir)
	}, nil
}

// Main runs the tests of a package and then stops the shared server, if one
// was started. Use it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) { shared.Main(m) }

// Shutdown stops the shared server, if this binary started one, and removes
// its directory. Main calls it; it is safe to call more than once.
func Shutdown() { shared.Shutdown() }

// URL returns the URL of the Redis shared by the tests of this binary:
// TEST_REDIS_URL when set, else a redis-server started on first use. It fails
// t with MissingHint when there is neither.
func URL(t testing.TB) string {
	t.Helper()
	return shared.URL(t)
}

// Prefix returns a key prefix unique to this test (and to this call), made
// of the test's name and random bytes, safe inside a hash tag. When the
// shared server is an external one (TEST_REDIS_URL), the test's keys are
// deleted when it ends.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		default:
			return '_'
		}
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	p := name + "-" + hex.EncodeToString(b[:])
	if os.Getenv(EnvURL) != "" {
		u := URL(t)
		t.Cleanup(func() { deletePrefix(u, p) })
	}
	return p
}

// Client returns a go-redis client of the shared server, closed at the end of
// the test.
func Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	return ClientOf(t, URL(t))
}

// ClientOf returns a go-redis client of the server at url, closed at the end
// of the test. It honours the deadlines of the contexts it is given.
func ClientOf(t testing.TB, url string) goredis.UniversalClient {
	t.Helper()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: parse %s: %v", url, err)
	}
	opts.ContextTimeoutEnabled = true
	c := goredis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// deletePrefix removes the keys whose name contains prefix, best effort.
func deletePrefix(url, prefix string) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
}
