// Package redistest gives tests a real Redis.
//
// By default it starts one throwaway redis-server per test binary, on a free
// loopback port in a temporary directory, the first time a test asks for it,
// and stops it when the binary ends (call Main from TestMain; on Linux the
// server is also tied to the test process so it never outlives it). When the
// environment variable TEST_REDIS_URL is set, that server is used instead.
// Every test gets its own key prefix (Prefix), so tests share one server
// safely and run in parallel.
//
// Start launches a dedicated server with options (append-only file, fixed
// port) that a test can stop, kill, restart, pause (SIGSTOP) and resume, for
// crash, restart and hang tests, without touching the shared server.
//
// When redis-server is not installed and TEST_REDIS_URL is not set, a test
// that needs Redis fails with a one-line hint; it never skips.
package redistest
