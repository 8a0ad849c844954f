package store

import (
	"fmt"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
)

// FormatVersion is the version of jobs.json this package writes. A file with
// a newer version is refused rather than rewritten. Version 2 homes may hold
// records in jobs.journal that readers must apply after jobs.json: builds
// that read only version 1 (and would miss them) refuse such a home.
const FormatVersion = 2

// State is the decoded jobs.json, handed to View and Update callbacks.
//
// Jobs are reached through Job, All and Add, which also tell the store which
// jobs a callback may have changed: only those are re-encoded when the file
// is written.
type State struct {
	// Version is the file format version.
	Version int
	// Generation counts the changes written (to jobs.json or as records);
	// it only grows.
	Generation uint64

	jobs     []*job.Job
	index    map[string]int
	dirty    map[*job.Job]bool
	allDirty bool
	reshaped bool // jobs added or removed

	chains chainSet // the chains and class breakers, beside the jobs
}

// fileState is the JSON form of State.
type fileState struct {
	Version    int        `json:"version"`
	Generation uint64     `json:"generation"`
	Jobs       []*job.Job `json:"jobs"`
	// Chains and Breakers are written on the closing line, and only when
	// there are any, so a file without chains keeps its old layout.
	Chains   []*chain.Chain   `json:"chains,omitempty"`
	Breakers []*chain.Breaker `json:"chain_breakers,omitempty"`
}

// Job returns the job with id for reading or changing, or nil.
func (s *State) Job(id string) *job.Job {
	if s.index == nil {
		s.reindex()
	}
	i, ok := s.index[id]
	if !ok || i >= len(s.jobs) || s.jobs[i].ID != id {
		return nil
	}
	j := s.jobs[i]
	s.touch(j)
	return j
}

// All returns every job, ordered by id, for reading or changing.
func (s *State) All() []*job.Job {
	s.allDirty = true
	return s.jobs
}

// Len returns the number of jobs.
func (s *State) Len() int { return len(s.jobs) }

// Add appends a job; an existing id is an error.
func (s *State) Add(j *job.Job) error {
	if s.index == nil {
		s.reindex()
	}
	if _, ok := s.index[j.ID]; ok {
		return fmt.Errorf("%w: %q", ErrExists, j.ID)
	}
	s.jobs = append(s.jobs, j)
	s.index[j.ID] = len(s.jobs) - 1
	s.touch(j)
	s.reshaped = true
	return nil
}

// Remove deletes the job with id and reports whether it existed.
func (s *State) Remove(id string) bool {
	if s.Job(id) == nil {
		return false
	}
	i := s.index[id]
	s.jobs = append(s.jobs[:i], s.jobs[i+1:]...)
	s.reindex()
	s.reshaped = true
	return true
}

func (s *State) touch(j *job.Job) {
	if s.dirty == nil {
		s.dirty = map[*job.Job]bool{}
	}
	s.dirty[j] = true
}

func (s *State) clean() {
	s.dirty, s.allDirty, s.reshaped = nil, false, false
	s.chains.dirty, s.chains.reshaped = false, false
}

func (s *State) reindex() {
	s.index = make(map[string]int, len(s.jobs))
	for i, j := range s.jobs {
		s.index[j.ID] = i
	}
}
