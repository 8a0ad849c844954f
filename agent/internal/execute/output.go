package execute

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/chronoscron/chronos/agent/output"
)

// outputFile is a run's output file (output/<job>/<run>.log), created at
// the first byte the run writes: a run that prints nothing leaves no file,
// and in a burst of such runs the disk is spared a file per run. A file
// that cannot be created fails every write, and Close returns why, so the
// run is recorded failed with the reason.
//
// The file holds both streams (what every reader of the output reads),
// each in the order the run wrote it and the two in the order they were
// read from their pipes; the byte ranges that came from standard error are
// written at Close beside it (output.StreamsFile), so that a reader can
// show the two apart. A file without it (a run recorded before the streams
// were told apart, or an agent that died mid-run) is one stream.
type outputFile struct {
	path   string
	mu     sync.Mutex
	f      *os.File
	err    error
	size   int64
	stderr [][2]int64 // [start, end) of each stretch of standard error
}

func (o *outputFile) Write(p []byte) (int, error) { return o.write(p, false) }

// Stderr returns the writer of the run's standard error into the file.
func (o *outputFile) Stderr() io.Writer { return stderrWriter{o} }

// stderrWriter writes a run's standard error into its output file.
type stderrWriter struct{ o *outputFile }

func (w stderrWriter) Write(p []byte) (int, error) { return w.o.write(p, true) }

func (o *outputFile) write(p []byte, stderr bool) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil && o.err == nil {
		if o.f, o.err = openOutput(o.path); o.err != nil {
			o.err = fmt.Errorf("output: %w", o.err)
		}
	}
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.f.Write(p)
	if stderr && n > 0 {
		if k := len(o.stderr); k > 0 && o.stderr[k-1][1] == o.size {
			o.stderr[k-1][1] += int64(n)
		} else {
			o.stderr = append(o.stderr, [2]int64{o.size, o.size + int64(n)})
		}
	}
	o.size += int64(n)
	return n, err
}

// Close closes the file if the run wrote any, writes the ranges of
// standard error beside it, and returns the error that kept it from being
// created or closed ("output: ...").
func (o *outputFile) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return o.err
	}
	err := o.f.Close()
	o.f = nil
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("output: %w", err)
	}
	if o.err == nil {
		data, _ := json.Marshal(output.Streams{Stderr: o.stderr})
		if err := os.WriteFile(output.StreamsFile(o.path), data, 0o600); err != nil {
			o.err = fmt.Errorf("output: %w", err)
		}
	}
	return o.err
}

func openOutput(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}
