package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/chronoscron/chronos/agent/job"
)

// newerFormat is the error of parseBase for a file of a newer format
// version than this build reads: not corrupt, and not to be overwritten.
type newerFormat int

func (v newerFormat) Error() string { return fmt.Sprintf("format version %d", int(v)) }

// parseBase decodes and checks raw, the content of jobs.json, and maps each
// job to its line (see splitLines). An error is the reason the content is
// corrupt, or a newerFormat.
func parseBase(raw []byte) (*State, map[*job.Job][]byte, error) {
	if err := checkText(raw); err != nil {
		return nil, nil, err
	}
	var fst fileState
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fst); err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("trailing data after the jobs object")
	}
	if fst.Version == 0 {
		return nil, nil, errors.New("missing version")
	}
	if fst.Version > FormatVersion {
		return nil, nil, newerFormat(fst.Version)
	}
	seen := make(map[string]bool, len(fst.Jobs))
	for i, j := range fst.Jobs {
		if j == nil {
			return nil, nil, fmt.Errorf("job %d is null", i)
		}
		if seen[j.ID] {
			return nil, nil, fmt.Errorf("job id %q appears twice", j.ID)
		}
		seen[j.ID] = true
	}
	st := &State{Version: fst.Version, Generation: fst.Generation, jobs: fst.Jobs}
	if err := st.chains.load(fst.Chains, fst.Breakers); err != nil {
		return nil, nil, err
	}
	st.reindex()
	return st, splitLines(raw, st.jobs), nil
}

// splitLines maps each job to its line in raw when raw has the layout
// encode writes (a header line, one job per line, a closing line); nil
// otherwise. A line holds a valid encoding of its job, so it can be written
// back unchanged while the job is not touched.
func splitLines(raw []byte, jobs []*job.Job) map[*job.Job][]byte {
	lines := bytes.Split(raw, []byte("\n"))
	if len(lines) != len(jobs)+3 || !bytes.HasSuffix(lines[0], []byte(`"jobs":[`)) || !bytes.HasPrefix(lines[len(lines)-2], []byte("]")) {
		return nil
	}
	enc := make(map[*job.Job][]byte, len(jobs))
	for i, j := range jobs {
		enc[j] = bytes.TrimSuffix(lines[i+1], []byte(","))
	}
	return enc
}

// readGeneration reads the generation from the head of the file, where
// encode puts it.
func readGeneration(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var head [96]byte
	n, _ := io.ReadFull(f, head[:])
	h := string(head[:n])
	const key = `"generation":`
	i := strings.Index(h, key)
	if i < 0 {
		return 0, false
	}
	h = h[i+len(key):]
	end := strings.IndexAny(h, ",}")
	if end < 0 {
		return 0, false
	}
	g, err := strconv.ParseUint(strings.TrimSpace(h[:end]), 10, 64)
	return g, err == nil
}

// encodeJobs returns each job's line and, ordered by job id, the lines
// that differ from what old holds. When old holds every job and the
// callback touched only some, old is updated in place and only those are
// encoded, so the cost follows the jobs changed, not the jobs held; the
// caller drops the cache if the write then fails.
func encodeJobs(st *State, old map[*job.Job][]byte) (map[*job.Job][]byte, [][]byte, error) {
	if old == nil || st.allDirty || st.reshaped {
		return encodeAll(st, old)
	}
	touched := make([]*job.Job, 0, len(st.dirty))
	for j := range st.dirty {
		touched = append(touched, j)
	}
	sort.Slice(touched, func(a, b int) bool { return touched[a].ID < touched[b].ID })
	var changed [][]byte
	for _, j := range touched {
		b, err := json.Marshal(j)
		if err != nil {
			return nil, nil, fmt.Errorf("store: encode job %s: %w", j.ID, err)
		}
		if line, ok := old[j]; !ok || !bytes.Equal(b, line) {
			changed = append(changed, b)
		}
		old[j] = b
	}
	return old, changed, nil
}

// encodeAll encodes every job the callback may have touched (all of them
// when it called All), reusing old's lines for the others.
func encodeAll(st *State, old map[*job.Job][]byte) (map[*job.Job][]byte, [][]byte, error) {
	enc := make(map[*job.Job][]byte, len(st.jobs))
	var changed [][]byte
	for _, j := range st.jobs {
		line, ok := old[j]
		if !ok || st.allDirty || st.dirty[j] {
			b, err := json.Marshal(j)
			if err != nil {
				return nil, nil, fmt.Errorf("store: encode job %s: %w", j.ID, err)
			}
			if !ok || !bytes.Equal(b, line) {
				changed = append(changed, b)
			}
			line = b
		}
		enc[j] = line
	}
	return enc, changed, nil
}

// encodeBase encodes st whole as jobs.json (enc holding every job's line).
func encodeBase(st *State, enc map[*job.Job][]byte) ([]byte, error) {
	size := 64
	for _, j := range st.jobs {
		size += len(enc[j]) + 2
	}
	tail, _, err := st.chains.tail()
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+len(tail)))
	fmt.Fprintf(buf, "{\"version\":%d,\"generation\":%d,\"jobs\":[", FormatVersion, st.Generation)
	for i, j := range st.jobs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		buf.Write(enc[j])
	}
	buf.WriteString("\n]")
	buf.Write(tail)
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}
