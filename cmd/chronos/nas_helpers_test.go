package main

import (
	"io"
	"sync"
)

// nasLockedWriter serialises writes from several goroutines.
type nasLockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *nasLockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
