package agentcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
)

// fireAnswerBodies are agents' answers to a fire: the shapes agents send
// and every way a body can leave the common shape.
var fireAnswerBodies = []string{
	`{"status":"accepted","job_id":"j","run_id":"r-1"}` + "\n",
	`{"status":"duplicate","job_id":"j"}`,
	`{"status":"gone"}`,
	`{"status":"refreshed"}`,
	` { "status" : "accepted" , "run_id" : "r" } ` + "\r\n\t",
	`{}`,
	`{ }`,
	``,
	`   `,
	`null`,
	`[]`,
	`"accepted"`,
	`{"status":"a","status":"b"}`,
	`{"Status":"Accepted","RUN_ID":"X"}`,
	`{"sTaTuS":"x","Run_Id":"y"}`,
	`{"run_id":"` + strings.Repeat("r", 200) + `","status":"` + strings.Repeat("s", 100) + `"}`,
	`{"status":"acc\u0065pted"}`,
	`{"status":"caf` + "\u00e9" + `"}`,
	`{"status":"bad` + "\xff" + `"}`,
	`{"status":"tab` + "\t" + `"}`,
	`{"status":5,"run_id":"r"}`,
	`{"status":null,"run_id":"r"}`,
	`{"status":"a","run_id":["r"]}`,
	`{"status":"a","extra":{"status":"b"}}`,
	`{"status":"a",}`,
	`{"status":"a"`,
	`{"status":"a"}}`,
	`{"status":"a"} x`,
	`{"status" "a"}`,
	`{status:"a"}`,
	`{"status":"a" "run_id":"b"}`,
	`{"st\"atus":"a"}`,
	`{"` + "\u017f" + `tatus":"a"}`,
	`{"ſtatus":"long s folds to s in encoding/json"}`,
	`{"status":"x","status":"accepted"}`,
	`{"status":"accepted"}{"status":"gone"}`,
	`{"run_id":""}`,
	"{\"status\":\"a\"}\x00",
	`{"status":"a","run_id":"b","status":5}`,
}

// referenceFireAnswer is what ClassifyAnswer read from a delivered answer
// with encoding/json alone.
func referenceFireAnswer(body []byte) (status, runID string) {
	var fr struct {
		Status string `json:"status"`
		RunID  string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &fr)
	return truncate(fr.Status, 64), truncate(fr.RunID, 128)
}

// TestFireAnswerFieldsIsJSONUnmarshal: the status and run_id read from a
// delivered answer are what encoding/json reads, for bodies of the common
// shape (read without it) and for every other body alike.
func TestFireAnswerFieldsIsJSONUnmarshal(t *testing.T) {
	t.Parallel()
	scanned := 0
	for _, body := range fireAnswerBodies {
		wantStatus, wantRun := referenceFireAnswer([]byte(body))
		if st, run := fireAnswerFields([]byte(body)); st != wantStatus || run != wantRun {
			t.Errorf("%q: status %q run_id %q, want %q %q", body, st, run, wantStatus, wantRun)
		}
		if _, _, ok := scanFireAnswer([]byte(body)); ok {
			scanned++
		}
	}
	// The shapes agents send are read by the scanner, not encoding/json.
	for _, body := range fireAnswerBodies[:7] {
		if _, _, ok := scanFireAnswer([]byte(body)); !ok {
			t.Errorf("%q is not read by the scanner", body)
		}
	}
	if scanned == len(fireAnswerBodies) {
		t.Error("every body took the scanner; the table has no fallback case")
	}
}

func FuzzFireAnswerFields(f *testing.F) {
	for _, body := range fireAnswerBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		wantStatus, wantRun := referenceFireAnswer(body)
		if st, run := fireAnswerFields(body); st != wantStatus || run != wantRun {
			t.Fatalf("%q: status %q run_id %q, want %q %q", body, st, run, wantStatus, wantRun)
		}
	})
}

// TestKnownStatus: known statuses and others read back as they are.
func TestKnownStatus(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"accepted", "duplicate", "gone", "refreshed", "custom", "", "accepted2", "Accepted"} {
		if got := knownStatus([]byte(s)); got != s {
			t.Errorf("knownStatus(%q) = %q", s, got)
		}
	}
}

// TestReadAnswer: an answer is read whole however the reader splits it,
// up to maxAgentResponse bytes, and up to an error.
func TestReadAnswer(t *testing.T) {
	t.Parallel()
	small := []byte(`{"status":"accepted"}`)
	big := bytes.Repeat([]byte("x"), maxAgentResponse+1000)
	mid := bytes.Repeat([]byte("y"), 3000)
	for _, tc := range []struct {
		name string
		r    func() []byte
		want []byte
	}{
		{"one read", func() []byte { return readAnswer(bytes.NewReader(small), make([]byte, 0, 512)) }, small},
		{"byte by byte", func() []byte { return readAnswer(iotest.OneByteReader(bytes.NewReader(small)), make([]byte, 0, 512)) }, small},
		{"data with EOF", func() []byte { return readAnswer(iotest.DataErrReader(bytes.NewReader(small)), make([]byte, 0, 512)) }, small},
		{"past the buffer", func() []byte { return readAnswer(bytes.NewReader(mid), make([]byte, 0, 512)) }, mid},
		{"no buffer", func() []byte { return readAnswer(bytes.NewReader(mid), nil) }, mid},
		{"capped", func() []byte { return readAnswer(bytes.NewReader(big), make([]byte, 0, 512)) }, big[:maxAgentResponse]},
		{"capped byte by byte", func() []byte { return readAnswer(iotest.HalfReader(bytes.NewReader(big)), nil) }, big[:maxAgentResponse]},
		{"error midway", func() []byte {
			return readAnswer(iotest.OneByteReader(errAfter(small[:5], errors.New("reset"))), make([]byte, 0, 512))
		}, small[:5]},
		{"empty", func() []byte { return readAnswer(bytes.NewReader(nil), make([]byte, 0, 512)) }, []byte{}},
	} {
		if got := tc.r(); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: read %d bytes %.40q, want %d", tc.name, len(got), got, len(tc.want))
		}
	}
}

// errAfter yields data, then err.
func errAfter(data []byte, err error) *errReader { return &errReader{data: data, err: err} }

type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}
