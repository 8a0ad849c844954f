// Package output reads a run's output file: the run's standard output and
// standard error in the order they came, and, beside it, which byte ranges
// came from standard error, so that the two can be shown apart. A file
// written before the streams were told apart has no ranges and is read as
// one stream.
package output

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Streams is the content of a run's streams file: the [start, end) byte
// ranges of its output file that came from standard error, in order; the
// rest came from standard output.
type Streams struct {
	Stderr [][2]int64 `json:"stderr"`
}

// StreamsFile is the path of the streams file of the output file at path
// (output/<job>/<run>.log → output/<job>/<run>.streams.json).
func StreamsFile(path string) string {
	return strings.TrimSuffix(path, ".log") + ".streams.json"
}

// ReadStreams reads the streams file of the output file at path. It
// reports false, with no error, when there is none (an output file of a run
// recorded as one stream).
func ReadStreams(path string) (Streams, bool, error) {
	var s Streams
	data, err := os.ReadFile(StreamsFile(path))
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("streams of %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, false, fmt.Errorf("streams of %s: %w", path, err)
	}
	return s, true, nil
}

// Split divides data, the bytes of an output file from offset base on,
// into what came from standard output and what came from standard error.
func (s Streams) Split(data []byte, base int64) (stdout, stderr []byte) {
	pos := base
	end := base + int64(len(data))
	for _, r := range s.Stderr {
		start, stop := max(r[0], pos), min(r[1], end)
		if start >= stop {
			continue
		}
		stdout = append(stdout, data[pos-base:start-base]...)
		stderr = append(stderr, data[start-base:stop-base]...)
		pos = stop
	}
	if pos < end {
		stdout = append(stdout, data[pos-base:]...)
	}
	return stdout, stderr
}
