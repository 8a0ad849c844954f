package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/chronoscron/chronos/agent/chain"
)

// Journal limits: jobs.json is written whole again (compacted) once
// Options.MaxRecords records (default DefaultMaxRecords) follow it, or once
// the records together outweigh it and MinCompactBytes, so reading a home
// stays bounded and the cost of compacting, paid once per many writes, is a
// constant share of each.
const (
	DefaultMaxRecords = 1024
	MinCompactBytes   = 1 << 20
)

// journal is what this process knows of the records that follow jobs.json.
type journal struct {
	count    int   // records applied on top of jobs.json
	bytes    int64 // their total size
	baseSize int64 // the size of jobs.json
}

// due reports whether the next write should compact instead of adding a
// record of size n to the at most limit records.
func (j journal) due(n, limit int) bool {
	total := j.bytes + int64(n)
	return j.count+1 > limit || (total > j.baseSize && total > MinCompactBytes)
}

// recordFile is the JSON form of one record: the generation it makes, the
// jobs it changed (whole), and, when the chains or breakers changed, all of
// them.
type recordFile struct {
	Version    int              `json:"version"`
	Generation uint64           `json:"generation"`
	Jobs       []*Job           `json:"jobs"`
	ChainsSet  bool             `json:"chains_set,omitempty"`
	Chains     []*chain.Chain   `json:"chains,omitempty"`
	Breakers   []*chain.Breaker `json:"chain_breakers,omitempty"`
}

// RecordPath returns the path of the record that makes generation gen.
func (s *Store) RecordPath(gen uint64) string {
	return filepath.Join(s.home, recordName(gen))
}

func recordName(gen uint64) string { return "jobs." + strconv.FormatUint(gen, 10) + ".json" }

// recordGeneration parses a record's file name ("" prefix/suffix mismatch:
// not a record).
func recordGeneration(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "jobs.")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".json")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	g, err := strconv.ParseUint(digits, 10, 64)
	return g, err == nil
}

// encodeRecord writes the record of generation gen: the given job lines,
// one per line as in jobs.json, and, when chains is not nil (the chains
// changed), the chains tail (possibly empty: none left).
func encodeRecord(gen uint64, lines [][]byte, chains []byte) []byte {
	size := 96 + len(chains)
	for _, l := range lines {
		size += len(l) + 2
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	fmt.Fprintf(buf, "{\"version\":%d,\"generation\":%d,\"jobs\":[", FormatVersion, gen)
	for i, l := range lines {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		buf.Write(l)
	}
	buf.WriteString("\n]")
	if chains != nil {
		buf.WriteString(`,"chains_set":true`)
		buf.Write(chains)
	}
	buf.WriteString("}\n")
	return buf.Bytes()
}

// decodeRecord checks and decodes the record read from the file of
// generation gen.
func decodeRecord(raw []byte, gen uint64) (*recordFile, error) {
	if err := checkText(raw); err != nil {
		return nil, err
	}
	var rec recordFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&rec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the record")
	}
	if rec.Version == 0 {
		return nil, errors.New("missing version")
	}
	if rec.Generation != gen {
		return nil, fmt.Errorf("record says generation %d, its name %d", rec.Generation, gen)
	}
	seen := make(map[string]bool, len(rec.Jobs))
	for i, j := range rec.Jobs {
		if j == nil {
			return nil, fmt.Errorf("job %d is null", i)
		}
		if seen[j.ID] {
			return nil, fmt.Errorf("job id %q appears twice", j.ID)
		}
		seen[j.ID] = true
	}
	return &rec, nil
}

// replay applies to st, in order, every record that follows its generation,
// keeping enc (when not nil) the encoding of each job and j the count and
// size of the records applied. A missing record ends the journal.
func (s *Store) replay(st *State, enc map[*Job][]byte, j *journal) error {
	added := false
	for {
		path := s.RecordPath(st.Generation + 1)
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("store: read %s: %w", path, err)
		}
		rec, err := decodeRecord(raw, st.Generation+1)
		if err != nil {
			return s.corrupt(path, raw, err)
		}
		if rec.Version > FormatVersion {
			return fmt.Errorf("store: %s has format version %d, this build reads up to %d", path, rec.Version, FormatVersion)
		}
		if rec.ChainsSet {
			if err := st.chains.load(rec.Chains, rec.Breakers); err != nil {
				return s.corrupt(path, raw, err)
			}
		}
		for _, nj := range rec.Jobs {
			if i, ok := st.index[nj.ID]; ok {
				delete(enc, st.jobs[i])
				st.jobs[i] = nj
			} else {
				st.jobs = append(st.jobs, nj)
				st.index[nj.ID] = len(st.jobs) - 1
				added = true
			}
			if enc != nil {
				line, err := json.Marshal(nj)
				if err != nil {
					return fmt.Errorf("store: encode job %s: %w", nj.ID, err)
				}
				enc[nj] = line
			}
		}
		st.Generation = rec.Generation
		j.count++
		j.bytes += int64(len(raw))
	}
	if added {
		sort.Slice(st.jobs, func(a, b int) bool { return st.jobs[a].ID < st.jobs[b].ID })
		st.reindex()
	}
	return nil
}

// pruneRecords removes the records that jobs.json of generation gen now
// holds. A record left behind (a crash, a failed removal) is harmless:
// readers start after jobs.json's generation.
func (s *Store) pruneRecords(gen uint64) {
	ents, err := os.ReadDir(s.home)
	if err != nil {
		return
	}
	for _, e := range ents {
		if g, ok := recordGeneration(e.Name()); ok && g <= gen {
			_ = os.Remove(filepath.Join(s.home, e.Name()))
		}
	}
}
