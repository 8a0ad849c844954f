package contract_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/chronoscron/chronos/contract"
)

const goodProvision = `{"job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56+00:00","agent_callback_url":"https://agent.example.com","dedup_key":"ab12cd34:2026-06-18T12:34:56+00:00"}`

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	const limit = 256
	padded := goodProvision + strings.Repeat(" ", limit-len(goodProvision))
	for _, tc := range []struct {
		name     string
		ct       string
		body     string
		chunked  bool // unknown length: no Content-Length, as a chunked upload
		wantCode string
	}{
		{name: "good", ct: "application/json", body: goodProvision},
		{name: "charset utf-8", ct: "application/json; charset=utf-8", body: goodProvision},
		{name: "charset UTF-8", ct: "application/json;charset=UTF-8", body: goodProvision},
		{name: "media type in capitals", ct: "Application/JSON", body: goodProvision},
		{name: "exactly at the limit", ct: "application/json", body: padded},
		{name: "exactly at the limit, chunked", ct: "application/json", body: padded, chunked: true},
		{name: "chunked", ct: "application/json", body: goodProvision, chunked: true},

		{name: "no Content-Type", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "text/plain", ct: "text/plain", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "form", ct: "application/x-www-form-urlencoded", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "json suffix type", ct: "application/merge-patch+json", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "other charset", ct: "application/json; charset=latin1", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "other parameter", ct: "application/json; version=2", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "malformed Content-Type", ct: "application/json; charset", body: goodProvision, wantCode: contract.CodeUnsupportedMediaType},
		{name: "wrong Content-Type wins over size", ct: "text/plain", body: padded + " ", wantCode: contract.CodeUnsupportedMediaType},

		{name: "declared too large", ct: "application/json", body: padded + " ", wantCode: contract.CodeBodyTooLarge},
		{name: "chunked too large", ct: "application/json", body: padded + " ", chunked: true, wantCode: contract.CodeBodyTooLarge},
		{name: "chunked far too large", ct: "application/json", body: strings.Repeat(" ", 10*limit) + goodProvision, chunked: true, wantCode: contract.CodeBodyTooLarge},

		{name: "unknown field", ct: "application/json", body: `{"job_id":"j","extra":1}`, wantCode: contract.CodeUnknownField},
		{name: "duplicate key", ct: "application/json", body: `{"job_id":"a","job_id":"b"}`, wantCode: contract.CodeDuplicateKey},
		{name: "trailing data", ct: "application/json", body: goodProvision + `{}`, wantCode: contract.CodeTrailingData},
		{name: "not JSON", ct: "application/json", body: `job_id=j`, wantCode: contract.CodeInvalidJSON},
		{name: "empty", ct: "application/json", body: ``, wantCode: contract.CodeInvalidJSON},
		{name: "null fire_at", ct: "application/json", body: `{"job_id":"j","fire_at":null}`, wantCode: contract.CodeInvalidFireAt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length
			}
			r := httptest.NewRequest(http.MethodPost, contract.PathProvision, body)
			if tc.chunked {
				r.ContentLength = -1
			}
			if tc.ct != "" {
				r.Header.Set("Content-Type", tc.ct)
			}
			var got contract.ProvisionRequest
			e := contract.DecodeRequest(httptest.NewRecorder(), r, limit, &got)
			if tc.wantCode == "" {
				if e != nil {
					t.Fatalf("DecodeRequest: %v", e)
				}
				want := contract.ProvisionRequest{
					JobID:            "ab12cd34",
					FireAt:           contract.NewTime(time.Date(2026, 6, 18, 12, 34, 56, 0, time.UTC)),
					AgentCallbackURL: "https://agent.example.com",
					DedupKey:         "ab12cd34:2026-06-18T12:34:56+00:00",
				}
				if got.JobID != want.JobID || !got.FireAt.Equal(want.FireAt.Time) || got.AgentCallbackURL != want.AgentCallbackURL || got.DedupKey != want.DedupKey {
					t.Errorf("decoded %+v, want %+v", got, want)
				}
				return
			}
			if e == nil {
				t.Fatalf("DecodeRequest accepted it; want %s", tc.wantCode)
			}
			if e.Code != tc.wantCode {
				t.Errorf("code %q (%v), want %q", e.Code, e, tc.wantCode)
			}
			if !reflect.DeepEqual(got, contract.ProvisionRequest{}) {
				t.Errorf("target changed on failure: %+v", got)
			}
			wantStatus := map[string]int{
				contract.CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
				contract.CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
			}[tc.wantCode]
			if wantStatus == 0 {
				wantStatus = http.StatusBadRequest
			}
			if e.HTTPStatus() != wantStatus {
				t.Errorf("status %d, want %d", e.HTTPStatus(), wantStatus)
			}
		})
	}
}

// decodeCase is one body and the code DecodeBytes must answer ("" = accept).
type decodeCase struct {
	name     string
	body     string
	wantCode string
}

func runDecodeCases[T any](t *testing.T, cases []decodeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v T
			e := contract.DecodeBytes([]byte(tc.body), &v)
			switch {
			case tc.wantCode == "" && e != nil:
				t.Fatalf("DecodeBytes(%s): %v", tc.body, e)
			case tc.wantCode != "" && e == nil:
				t.Fatalf("DecodeBytes(%s) accepted it as %+v; want %s", tc.body, v, tc.wantCode)
			case e != nil && e.Code != tc.wantCode:
				t.Fatalf("DecodeBytes(%s): code %q (%v), want %q", tc.body, e.Code, e, tc.wantCode)
			case e != nil && e.HTTPStatus() != http.StatusBadRequest:
				t.Fatalf("DecodeBytes(%s): status %d, want 400", tc.body, e.HTTPStatus())
			case e != nil && e.Description == "":
				t.Fatalf("DecodeBytes(%s): %s without a description", tc.body, e.Code)
			}
		})
	}
}

func TestDecodeBytesFire(t *testing.T) {
	t.Parallel()
	const good = `{"job_id":"j1","fire_at":"2026-06-18T09:00:00Z","schedule_id":"s1","attempt":2}`
	runDecodeCases[contract.FireRequest](t, []decodeCase{
		{"good", good, ""},
		{"white space around", " \n\t" + good + "\r\n ", ""},
		{"keys in any order", `{"attempt":2,"schedule_id":"s1","fire_at":"2026-06-18T09:00:00Z","job_id":"j1"}`, ""},
		{"escaped key", `{"job\u005fid":"j1"}`, ""},
		{"missing fire_at is not the decoder's business", `{"job_id":"j1"}`, ""},
		{"empty object", `{}`, ""},

		{"unknown field", `{"job_id":"j1","extra":true}`, contract.CodeUnknownField},
		{"unknown nested object", `{"job_id":"j1","meta":{"a":1}}`, contract.CodeUnknownField},
		{"case-variant single key", `{"Job_ID":"j1"}`, contract.CodeUnknownField},
		{"case-variant single key, all caps", `{"JOB_ID":"j1"}`, contract.CodeUnknownField},
		{"Kelvin sign folds to k in encoding/json", "{\"job_id\":\"j1\",\"attempt\":1,\"\u212aey\":1}", contract.CodeUnknownField},
		{"long s folds to s in encoding/json", "{\"\u017fchedule_id\":\"s1\"}", contract.CodeUnknownField},
		{"duplicate key", `{"job_id":"a","job_id":"b"}`, contract.CodeDuplicateKey},
		{"duplicate key, same value", `{"job_id":"a","job_id":"a"}`, contract.CodeDuplicateKey},
		{"case-variant duplicate key", `{"job_id":"a","JOB_ID":"b"}`, contract.CodeDuplicateKey},
		{"case-variant duplicate key, first unknown spelling", `{"Job_Id":"a","job_id":"b"}`, contract.CodeUnknownField},
		{"escaped duplicate key", `{"job_id":"a","job\u005fid":"b"}`, contract.CodeDuplicateKey},
		{"two objects", good + ` {"job_id":"j2"}`, contract.CodeTrailingData},
		{"two objects, no space", good + good, contract.CodeTrailingData},
		{"object then junk", good + `x`, contract.CodeTrailingData},
		{"object then bracket", good + `]`, contract.CodeTrailingData},
		{"object then number", good + ` 1`, contract.CodeTrailingData},
		{"not JSON", `job_id=j1`, contract.CodeInvalidJSON},
		{"single quotes", `{'job_id':'j1'}`, contract.CodeInvalidJSON},
		{"truncated", `{"job_id":"j1"`, contract.CodeInvalidJSON},
		{"trailing comma", `{"job_id":"j1",}`, contract.CodeInvalidJSON},
		{"comment", `{"job_id":"j1"} // x`, contract.CodeTrailingData},
		{"empty", ``, contract.CodeInvalidJSON},
		{"only white space", " \n ", contract.CodeInvalidJSON},
		{"null fire_at", `{"job_id":"j1","fire_at":null}`, contract.CodeInvalidFireAt},
		{"numeric fire_at", `{"fire_at":1781773200}`, contract.CodeInvalidFireAt},
		{"object fire_at", `{"fire_at":{}}`, contract.CodeInvalidFireAt},
		{"lax fire_at", `{"fire_at":"2026-06-18T9:00:00Z"}`, contract.CodeInvalidFireAt},
		{"comma fraction", `{"fire_at":"2026-06-18T09:00:00,5Z"}`, contract.CodeInvalidFireAt},
		{"empty fire_at", `{"fire_at":""}`, contract.CodeInvalidFireAt},
		{"numeric job_id", `{"job_id":5}`, contract.CodeInvalidRequest},
		{"null job_id", `{"job_id":null}`, contract.CodeInvalidRequest},
		{"boolean job_id", `{"job_id":true}`, contract.CodeInvalidRequest},
		{"array job_id", `{"job_id":["j1"]}`, contract.CodeInvalidRequest},
		{"string attempt", `{"attempt":"1"}`, contract.CodeInvalidRequest},
		{"fractional attempt", `{"attempt":1.5}`, contract.CodeInvalidRequest},
		{"exponent attempt", `{"attempt":1e2}`, contract.CodeInvalidRequest},
		{"huge attempt", `{"attempt":99999999999999999999999}`, contract.CodeInvalidRequest},
		{"null attempt", `{"attempt":null}`, contract.CodeInvalidRequest},
		{"array body", `[` + good + `]`, contract.CodeInvalidRequest},
		{"string body", `"job_id"`, contract.CodeInvalidRequest},
		{"number body", `42`, contract.CodeInvalidRequest},
		{"null body", `null`, contract.CodeInvalidRequest},
	})
}

func TestDecodeBytesNested(t *testing.T) {
	t.Parallel()
	const arm = `{"job_id":"j1","fire_at":"2026-06-18T09:00:00Z","agent_callback_url":"https://a.example.com","dedup_key":"j1:2026-06-18T09:00:00Z"}`
	runDecodeCases[contract.PutArmedRequest](t, []decodeCase{
		{"good", `{"armed":[` + arm + `,` + arm + `]}`, ""},
		{"empty set", `{"armed":[]}`, ""},
		{"null set", `{"armed":null}`, contract.CodeInvalidRequest},
		{"null entry", `{"armed":[null]}`, contract.CodeInvalidRequest},
		{"object for array", `{"armed":{}}`, contract.CodeInvalidRequest},
		{"unknown nested field", `{"armed":[{"job_id":"j1","x":1}]}`, contract.CodeUnknownField},
		{"duplicate nested key", `{"armed":[{"job_id":"j1","job_id":"j2"}]}`, contract.CodeDuplicateKey},
		{"case-variant nested duplicate", `{"armed":[{"dedup_key":"a","DEDUP_KEY":"b"}]}`, contract.CodeDuplicateKey},
		{"bad nested fire_at", `{"armed":[` + arm + `,{"fire_at":"2026-06-18T09:00:00+24:00"}]}`, contract.CodeInvalidFireAt},
		{"null nested fire_at", `{"armed":[{"fire_at":null}]}`, contract.CodeInvalidFireAt},
		{"wrong nested type", `{"armed":[{"job_id":1}]}`, contract.CodeInvalidRequest},
		{"duplicate outer key", `{"armed":[],"armed":[]}`, contract.CodeDuplicateKey},
	})
	runDecodeCases[contract.FailedFire](t, []decodeCase{
		{"good", `{"job_id":"j","fire_at":"2026-06-18T09:00:00Z","failed_at":"2026-06-18T09:05:00Z"}`, ""},
		{"another time field is invalid_request", `{"failed_at":"2026-06-18T09:05:00"}`, contract.CodeInvalidRequest},
		{"null other time field", `{"failed_at":null}`, contract.CodeInvalidRequest},
	})
	runDecodeCases[contract.PutArmedRequest](t, []decodeCase{
		{"missing set decodes to nil, empty set to empty", `{}`, ""},
	})
	runDecodeCases[contract.ListResponse](t, []decodeCase{
		{"null cursor is allowed", `{"armed":[],"next_cursor":null,"failed_fires":[]}`, ""},
		{"cursor", `{"armed":[],"next_cursor":"c","failed_fires":[]}`, ""},
	})
}

// A missing fire_at decodes to the zero Time: the decoder only checks the
// form; handlers check that required fields are present.
func TestDecodeMissingFireAtIsZero(t *testing.T) {
	t.Parallel()
	var v contract.ProvisionRequest
	if e := contract.DecodeBytes([]byte(`{"job_id":"j1"}`), &v); e != nil {
		t.Fatal(e)
	}
	if !v.FireAt.IsZero() {
		t.Errorf("FireAt = %s, want the zero Time", v.FireAt)
	}
}

// An absent array decodes to nil and an empty one to an empty slice, so a
// handler can tell "armed" missing from "armed": [] (null is refused).
func TestDecodeMissingArrayIsNil(t *testing.T) {
	t.Parallel()
	var missing, empty contract.PutArmedRequest
	if e := contract.DecodeBytes([]byte(`{}`), &missing); e != nil {
		t.Fatal(e)
	}
	if e := contract.DecodeBytes([]byte(`{"armed":[]}`), &empty); e != nil {
		t.Fatal(e)
	}
	if missing.Armed != nil || empty.Armed == nil || len(empty.Armed) != 0 {
		t.Errorf("missing: %#v, empty: %#v; want nil and an empty slice", missing.Armed, empty.Armed)
	}
}

func TestDecodeLeavesTargetOnFailure(t *testing.T) {
	t.Parallel()
	v := contract.FireRequest{JobID: "before", Attempt: 7}
	if e := contract.DecodeBytes([]byte(`{"job_id":"after","attempt":"x"}`), &v); e == nil {
		t.Fatal("want an error")
	}
	if v.JobID != "before" || v.Attempt != 7 {
		t.Errorf("target changed on failure: %+v", v)
	}
}

func TestDecodeReaderErrors(t *testing.T) {
	t.Parallel()
	var v contract.CancelRequest
	if e := contract.Decode(iotest.ErrReader(errors.New("connection reset")), 1024, &v); e == nil || e.Code != contract.CodeInvalidRequest {
		t.Errorf("read error: got %v, want %s", e, contract.CodeInvalidRequest)
	}
	if e := contract.Decode(strings.NewReader(`{"job_id":"j"}`), 4, &v); e == nil || e.Code != contract.CodeBodyTooLarge || e.HTTPStatus() != http.StatusRequestEntityTooLarge {
		t.Errorf("over the limit: got %v, want 413 %s", e, contract.CodeBodyTooLarge)
	}
	if e := contract.Decode(strings.NewReader(`{"job_id":"j"}`), 0, &v); e != nil || v.JobID != "j" {
		t.Errorf("limit 0 means the default: got %v, %+v", e, v)
	}
	if e := contract.Decode(strings.NewReader(strings.Repeat(" ", contract.DefaultMaxBodyBytes)+"{}"), 0, &v); e == nil || e.Code != contract.CodeBodyTooLarge {
		t.Errorf("over the default limit: got %v", e)
	}
	if e := contract.DecodeBytes([]byte(`{}`), v); e == nil || e.HTTPStatus() != http.StatusInternalServerError {
		t.Errorf("non-pointer target: got %v, want a 500", e)
	}
}

// absent reports whether v holds a field that was absent from the JSON it was
// decoded from and re-encodes as null: a zero contract.Time or a nil slice
// written without omitempty.
func absent(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && absent(v.Elem())
	case reflect.Struct:
		if t, ok := v.Interface().(contract.Time); ok {
			return t.IsZero()
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if v.Field(i).Kind() == reflect.Slice && v.Field(i).IsNil() && !strings.Contains(f.Tag.Get("json"), "omitempty") {
				return true
			}
			if absent(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if absent(v.Index(i)) {
				return true
			}
		}
	}
	return false
}

// roundTrip checks that what DecodeBytes accepted re-encodes, decodes again
// and re-encodes to the same bytes.
func roundTrip[T any](t *testing.T, data []byte) {
	var v T
	if e := contract.DecodeBytes(data, &v); e != nil {
		if e.Code == "" || e.Description == "" || e.HTTPStatus() != http.StatusBadRequest {
			t.Fatalf("DecodeBytes(%q): malformed error %#v", data, e)
		}
		return
	}
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%+v): %v", v, err)
	}
	var again T
	e := contract.DecodeBytes(first, &again)
	if absent(reflect.ValueOf(v)) {
		// An absent time or array is written as null, which decoding refuses.
		if e == nil {
			t.Fatalf("%s with an absent time decoded again", first)
		}
		return
	}
	if e != nil {
		t.Fatalf("DecodeBytes(%q) accepted; its encoding %s is refused: %v", data, first, e)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("round trip of %q: %s then %s", data, first, second)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		goodProvision,
		`{"job_id":"j1","fire_at":"2026-06-18T09:00:00.5-14:00","schedule_id":"s1","attempt":2}`,
		`{"armed":[{"job_id":"j1","fire_at":"2026-06-18T09:00:00Z","agent_callback_url":"u","dedup_key":"d"}]}`,
		`{"job_id":"a","JOB_ID":"b"}`, `{"job_id":"a"} {}`, `{"fire_at":null}`, `{}`, `null`, `[]`,
		`{"attempt":1e2}`, `{"job_id":"\ud800"}`, "{\"job_id\":\"\xff\"}", `{"armed":[null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[contract.ProvisionRequest](t, data)
		roundTrip[contract.FireRequest](t, data)
		roundTrip[contract.PutArmedRequest](t, data)
		roundTrip[contract.RelayRequest](t, data)
		roundTrip[contract.DLQReplayRequest](t, data)
	})
}
