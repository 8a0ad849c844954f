package cronkeys

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/chronoscron/chronos/contract"
)

var errCorrupt = errors.New("cronkeys: the key file does not decode")

// read reads the file into a snapshot. A file that does not decode is an
// empty snapshot and errCorrupt.
func (s *Store) read() (*snapshot, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return newSnapshot(nil, nil), nil
	}
	if err != nil {
		return nil, fmt.Errorf("cronkeys: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cronkeys: %w", err)
	}
	var c content
	dec := json.NewDecoder(f)
	if err := dec.Decode(&c); err != nil {
		s.o.Logger.Warn("cronkeys: the key file does not decode; the jobs' keys are fetched again at the next reconcile", "file", s.path, "error", jsonErrorKind(err))
		return newSnapshot(nil, info), errCorrupt
	}
	return newSnapshot(c.Jobs, info), nil
}

// jsonErrorKind describes a decoding error without quoting the file.
func jsonErrorKind(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("wrong type at byte %d", te.Offset)
	}
	return "does not decode"
}

func newSnapshot(jobs map[string]*Job, info fs.FileInfo) *snapshot {
	sn := &snapshot{jobs: make(map[string][]liveKey, len(jobs)), raw: jobs, info: info}
	if sn.raw == nil {
		sn.raw = map[string]*Job{}
	}
	for id, j := range jobs {
		if j == nil {
			continue
		}
		var keys []liveKey
		if j.Current != nil {
			if secret, ok := decodeSecret(j.Current.Key); ok {
				keys = append(keys, liveKey{id: j.Current.ID, secret: secret})
			}
		}
		for _, r := range j.Retired {
			secret, ok := decodeSecret(r.Key)
			if !ok || r.ValidThrough == nil {
				continue
			}
			keys = append(keys, liveKey{id: r.ID, secret: secret, through: *r.ValidThrough})
		}
		if len(keys) > 0 || j.Current != nil {
			sn.jobs[id] = keys
		}
	}
	return sn
}

func decodeSecret(enc string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) != contract.CronKeyBytes {
		return nil, false
	}
	return b, true
}

// current returns the snapshot, first reading the file again when another
// process replaced it since it was last looked at: at most every Recheck,
// or now when force.
func (s *Store) current(force bool) *snapshot {
	sn := s.snap.Load()
	now := time.Now().UnixNano()
	if !force && now-s.checked.Load() < int64(s.o.Recheck) {
		return sn
	}
	s.checked.Store(now)
	info, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && sn.info == nil:
		return sn
	case err == nil && sn.info != nil && os.SameFile(info, sn.info) && info.ModTime().Equal(sn.info.ModTime()) && info.Size() == sn.info.Size():
		return sn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh, err := s.read()
	if fresh == nil {
		s.o.Logger.Warn("cronkeys: reading the key file failed", "error", err)
		return sn
	}
	s.snap.Store(fresh)
	return fresh
}
