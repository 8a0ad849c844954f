package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// throwawayRedis is a redis-server this program started on a free loopback
// port, without persistence, and stops at the end.
type throwawayRedis struct {
	cmd *exec.Cmd
	dir string
	url string
}

// startRedis starts redis-server (the binary at path) on a free loopback
// port and waits until it answers.
func startRedis(ctx context.Context, path string) (*throwawayRedis, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	dir, err := os.MkdirTemp("", "peerbench-redis-")
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis: %w", err)
	}
	r := &throwawayRedis{cmd: cmd, dir: dir, url: fmt.Sprintf("redis://127.0.0.1:%d", port)}
	opt, _ := redis.ParseURL(r.url)
	c := redis.NewClient(opt)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.stop()
			return nil, fmt.Errorf("start redis: no answer on %s: %w", r.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the redis-server and removes its directory.
func (r *throwawayRedis) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(r.dir)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisCPU is Redis's CPU time so far (user and system), in seconds.
func redisCPU(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("redis info cpu: %w", err)
	}
	var total float64
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("redis info cpu: %s: %w", name, err)
		}
		total += v
		found++
	}
	if found != 2 {
		return 0, errors.New("redis info cpu: no used_cpu_user and used_cpu_sys")
	}
	return total, nil
}

// unlinkMatching removes every key matching pattern, and reports how many.
func unlinkMatching(ctx context.Context, c *redis.Client, pattern string) (int, error) {
	n := 0
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return n, fmt.Errorf("scan %s: %w", pattern, err)
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return n, fmt.Errorf("unlink %s: %w", pattern, err)
			}
			n += len(keys)
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}
