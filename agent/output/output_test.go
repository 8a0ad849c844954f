package output

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	data := []byte("out1 ERR1 out2 ERR2")
	s := Streams{Stderr: [][2]int64{{5, 10}, {15, 19}}}
	tests := []struct {
		name           string
		data           []byte
		base           int64
		stdout, stderr string
	}{
		{"whole file", data, 0, "out1 out2 ", "ERR1 ERR2"},
		{"the tail only", data[7:], 7, "out2 ", "R1 ERR2"},
		{"no stderr in reach", data[10:15], 10, "out2 ", ""},
		{"nothing", nil, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errb := s.Split(tt.data, tt.base)
			if string(out) != tt.stdout || string(errb) != tt.stderr {
				t.Errorf("Split = %q, %q; want %q, %q", out, errb, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestReadStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "r1.log")
	if _, ok, err := ReadStreams(log); ok || err != nil {
		t.Fatalf("no streams file: ok %v err %v, want one stream and no error", ok, err)
	}
	if StreamsFile(log) != filepath.Join(dir, "r1.streams.json") {
		t.Fatalf("StreamsFile = %s", StreamsFile(log))
	}
	if err := os.WriteFile(StreamsFile(log), []byte(`{"stderr":[[1,3]]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, ok, err := ReadStreams(log)
	if !ok || err != nil || len(s.Stderr) != 1 || s.Stderr[0] != [2]int64{1, 3} {
		t.Fatalf("ReadStreams = %v %v %v", s, ok, err)
	}
	if err := os.WriteFile(StreamsFile(log), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadStreams(log); err == nil {
		t.Fatal("a broken streams file read without an error")
	}
}
