package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// follower reads the lines appended to the directory by anything but this
// Ledger, for ObserveAll. It starts with the first ObserveAll, at the end
// of the day files there are then; a day file made later is read from its
// start.
//
// The lines this Ledger appends are told to the observers by Append; the
// follower tells them only the others. Append writes its line and notes
// where it went with mine held, so when Follow, holding mine after reading
// a file, finds no note for a line it read, no Append of this Ledger wrote
// it.
type follower struct {
	// mine guards on and own.
	mine sync.Mutex
	on   bool
	// own holds, by day file name, the offsets of the lines this Ledger
	// wrote that Follow has not passed yet.
	own map[string]map[int64]struct{}

	// scan serialises Follow and guards at.
	scan sync.Mutex
	at   map[string]*tailFile // by day file name
}

// tailFile is how far Follow has read one day file: up to off, the end of
// its last whole line.
type tailFile struct {
	info fs.FileInfo
	off  int64
}

// start starts following dir, at the end of its day files, unless it is
// already followed.
func (fo *follower) start(dir string) {
	fo.scan.Lock()
	defer fo.scan.Unlock()
	fo.mine.Lock()
	defer fo.mine.Unlock()
	if fo.on {
		return
	}
	fo.on = true
	fo.own = map[string]map[int64]struct{}{}
	fo.at = map[string]*tailFile{}
	days, _ := listDays(dir)
	for _, d := range days {
		name := d + ".jsonl"
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			fo.at[name] = &tailFile{info: fi, off: fi.Size()}
		}
	}
}

// write writes b, whole lines of this Ledger (after lead bytes ending a
// torn line), at the end of f, and notes where each line went if the
// directory is followed.
func (fo *follower) write(f *os.File, b []byte, lead int) error {
	fo.mine.Lock()
	defer fo.mine.Unlock()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if !fo.on {
		return nil
	}
	// f is in append mode: the write left its offset at the end of b.
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil // the line is written; Follow may tell it once more
	}
	name := filepath.Base(f.Name())
	if fo.own[name] == nil {
		fo.own[name] = map[int64]struct{}{}
	}
	at := end - int64(len(b))
	for i := lead; i < len(b); {
		fo.own[name][at+int64(i)] = struct{}{}
		n := bytes.IndexByte(b[i:], '\n')
		if n < 0 {
			break
		}
		i += n + 1
	}
	return nil
}

// takeOwn removes and returns the offsets of this Ledger's lines in file
// name before end.
func (fo *follower) takeOwn(name string, end int64) map[int64]struct{} {
	fo.mine.Lock()
	defer fo.mine.Unlock()
	taken := map[int64]struct{}{}
	for off := range fo.own[name] {
		if off < end {
			taken[off] = struct{}{}
			delete(fo.own[name], off)
		}
	}
	return taken
}

// forget drops what is known of day file name, gone from dir: unless an
// Append has made it again since.
func (fo *follower) forget(dir, name string) {
	delete(fo.at, name)
	fo.mine.Lock()
	defer fo.mine.Unlock()
	if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
		delete(fo.own, name)
	}
}

// Follow reads what was appended to the day files since the last Follow
// (since the first ObserveAll, at first) and tells ObserveAll's observers,
// in file order, of each whole line this Ledger did not append. A last
// line without its newline is not whole yet: a later Follow reads it once
// it is. A day file made since is read from its start; one removed
// (retention) is forgotten; a torn line ended by a later append is
// skipped, as readers skip it. Without ObserveAll, Follow does nothing.
func (l *Ledger) Follow(ctx context.Context) error {
	fo := &l.fol
	fo.scan.Lock()
	defer fo.scan.Unlock()
	if fo.at == nil {
		return nil
	}
	days, err := listDays(l.dir)
	if err != nil {
		return err
	}
	present := make(map[string]bool, len(days))
	for _, d := range days {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		name := d + ".jsonl"
		present[name] = true
		if err := l.followFile(name); err != nil {
			return err
		}
	}
	for name := range fo.at {
		if !present[name] {
			fo.forget(l.dir, name)
		}
	}
	return nil
}

// followFile reads the whole lines appended to day file name since Follow
// last read it and tells the observers of those of others.
func (l *Ledger) followFile(name string) error {
	fo := &l.fol
	f, err := os.Open(filepath.Join(l.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since it was listed
	}
	if err != nil {
		return fmt.Errorf("ledger: follow: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: follow: %w", err)
	}
	tf := fo.at[name]
	if tf == nil || !os.SameFile(tf.info, fi) || fi.Size() < tf.off {
		tf = &tailFile{info: fi} // new, or made again: from its start
		fo.at[name] = tf
	}
	if fi.Size() == tf.off {
		return nil
	}
	buf := make([]byte, fi.Size()-tf.off)
	n, err := f.ReadAt(buf, tf.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("ledger: follow: %w", err)
	}
	whole := bytes.LastIndexByte(buf[:n], '\n') + 1
	if whole == 0 {
		return nil // the last line is not whole yet
	}
	own := fo.takeOwn(name, tf.off+int64(whole))
	for pos := 0; pos < whole; {
		line := buf[pos : pos+bytes.IndexByte(buf[pos:whole], '\n')]
		at := tf.off + int64(pos)
		pos += len(line) + 1
		if _, mine := own[at]; mine || len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if e, ok, err := decodeLine(line); ok && err == nil {
			l.obs.notifyOthers(e)
		}
	}
	tf.info, tf.off = fi, tf.off+int64(whole)
	return nil
}
