package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// replyErr is a server error reply as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestRetryable(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", dial, true},
		{"read timeout", timeout, true},
		{"connection reset", fmt.Errorf("wrapped: %w", syscall.ECONNRESET), true},
		{"connection closed by the server", io.EOF, true},
		{"pool timeout", goredis.ErrPoolTimeout, true},
		{"every sentinel down", errors.New("redis: all sentinels specified in configuration are unreachable"), true},
		{"server loading its data", replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"replica after a failover", replyErr("READONLY You can't write against a read only replica."), true},
		{"busy script", replyErr("BUSY Redis is busy running a script."), true},
		{"cluster down", replyErr("CLUSTERDOWN The cluster is down"), true},
		{"script error", replyErr("ERR user_script:1: Script attempted to access nonexistent global variable"), false},
		{"busy key is not transient", replyErr("BUSYKEY Target key name already exists."), false},
		{"wrong password", replyErr("WRONGPASS invalid username-password pair"), false},
		{"out of memory", replyErr("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"caller cancelled", context.Canceled, false},
		{"caller deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), false},
		{"engine closed", goredis.ErrClosed, false},
		{"tls misconfiguration", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, false},
		{"a reply of an unexpected shape", errReply, false},
		{"any other error", errors.New("redis: something unforeseen"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("%s: retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
