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

func closeAll(lns []net.Listener) {
	for _, l := range lns {
		_ = l.Close()
	}
}
