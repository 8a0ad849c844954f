// Package activation lets the agent scale to zero on a plain Linux host: it
// takes over listening sockets passed by systemd socket activation, and it
// tells when the process has been idle long enough to exit.
//
// With a socket unit, systemd listens on the agent's port while the agent is
// stopped; the first connection (NAS delivering a fire) starts the service,
// which receives the listening socket as file descriptor 3 and is told so by
// LISTEN_FDS=1 and LISTEN_PID=<its pid> (sd_listen_fds(3)). The connection
// waits in the socket's backlog until the agent accepts it, so no fire is
// refused while the agent starts.
//
// The protocol is read here rather than with go-systemd's activation
// package, which reads the process environment and pid itself and drops
// what it cannot use without a word: a malformed LISTEN_FDS means no
// sockets, and a passed descriptor that is no listening socket becomes a nil
// listener. The agent would then listen on its configured address while
// systemd keeps the real socket and its queued fires. Here each of those is
// an error the unit's start reports, the environment and pid are parameters
// (the tests run in parallel without touching the process environment), and
// CHRONOS_LISTEN_PID_ANY serves supervisors that cannot know the pid.
package activation

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
)

// Environment variables of the socket activation protocol.
const (
	EnvListenFDs     = "LISTEN_FDS"
	EnvListenPID     = "LISTEN_PID"
	EnvListenFDNames = "LISTEN_FDNAMES"
	// EnvListenPIDAny=1 accepts a socket passed with LISTEN_FDS whatever
	// LISTEN_PID says, for supervisors that cannot know the agent's pid
	// before starting it. systemd sets LISTEN_PID correctly and needs it not.
	EnvListenPIDAny = "CHRONOS_LISTEN_PID_ANY"
	// FirstFD is the first passed file descriptor (SD_LISTEN_FDS_START).
	FirstFD = 3
	// maxFDs bounds LISTEN_FDS against nonsense values.
	maxFDs = 64
)

// Options say how to read the protocol.
type Options struct {
	// Getenv reads the environment (os.Getenv in the binary).
	Getenv func(string) string
	// PID is this process's pid; LISTEN_PID must equal it.
	PID int
	// AnyPID accepts the sockets whatever LISTEN_PID says. A parent that
	// starts the agent directly cannot know the child's pid before it
	// starts; tests and supervisors other than systemd set this.
	AnyPID bool
}

// Listeners returns the listening sockets passed to this process, or none
// when LISTEN_FDS is unset or LISTEN_PID names another process (the
// variables were inherited, not meant for us). The passed descriptors are
// taken over: the returned listeners own close-on-exec duplicates and the
// originals are closed, so runs started later do not inherit them.
func Listeners(o Options) ([]net.Listener, error) {
	nfds := o.Getenv(EnvListenFDs)
	if nfds == "" {
		return nil, nil
	}
	if !o.AnyPID {
		pid, err := strconv.Atoi(o.Getenv(EnvListenPID))
		if err != nil || pid != o.PID {
			return nil, nil
		}
	}
	n, err := strconv.Atoi(nfds)
	if err != nil || n < 0 || n > maxFDs {
		return nil, fmt.Errorf("activation: %s=%q is not a count of descriptors", EnvListenFDs, nfds)
	}
	out := make([]net.Listener, 0, n)
	for fd := FirstFD; fd < FirstFD+n; fd++ {
		f := os.NewFile(uintptr(fd), "systemd-socket-"+strconv.Itoa(fd))
		if f == nil {
			closeAll(out)
			return nil, fmt.Errorf("activation: descriptor %d is not open", fd)
		}
		ln, err := net.FileListener(f)
		_ = f.Close()
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("activation: descriptor %d is not a listening socket: %w", fd, err)
		}
		out = append(out, ln)
	}
	return out, nil
}

// Listener returns the one passed socket, nil when none was passed, and an
// error when more than one was.
func Listener(o Options) (net.Listener, error) {
	lns, err := Listeners(o)
	if err != nil {
		return nil, err
	}
	switch len(lns) {
	case 0:
		return nil, nil
	case 1:
		return lns[0], nil
	default:
		closeAll(lns)
		return nil, errors.New("activation: more than one socket passed; the agent listens on one")
	}
}

// FromEnv returns the one socket passed to this process through its
// environment (nil when none was), honouring EnvListenPIDAny. It then
// removes the protocol's variables from the environment either way, so that
// the runs the agent starts do not believe they were activated.
func FromEnv() (net.Listener, error) {
	ln, err := Listener(Options{Getenv: os.Getenv, PID: os.Getpid(), AnyPID: os.Getenv(EnvListenPIDAny) == "1"})
	for _, k := range []string{EnvListenFDs, EnvListenPID, EnvListenFDNames, EnvListenPIDAny} {
		_ = os.Unsetenv(k)
	}
	return ln, err
}

func closeAll(lns []net.Listener) {
	for _, l := range lns {
		_ = l.Close()
	}
}
