package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
)

// DecodeRequest reads r's body strictly into v (a pointer to a struct of this
// package) through http.MaxBytesReader, after checking that Content-Type is
// application/json. See Decode for the rules. On failure nothing is assigned
// to v and the *Error says which rule was broken.
func DecodeRequest(w http.ResponseWriter, r *http.Request, limit int64, v any) *Error {
	if err := CheckJSONContentType(r.Header.Get(HeaderContentType)); err != nil {
		return err
	}
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	if r.ContentLength > limit {
		return Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "body is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	return Decode(http.MaxBytesReader(w, r.Body, limit), limit, v)
}

// CheckJSONContentType accepts application/json with an optional utf-8 charset.
func CheckJSONContentType(ct string) *Error {
	if ct == "" {
		return Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != MediaTypeJSON {
		return Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json, not %q", truncate(ct, 64))
	}
	for k, val := range params {
		if k != "charset" || !strings.EqualFold(val, "utf-8") {
			return Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type parameter %s=%s is not supported", k, truncate(val, 32))
		}
	}
	return nil
}

// Decode reads at most limit bytes of JSON from body into v strictly:
//   - the body is one JSON value and nothing else but white space (trailing_data);
//   - every object key names a field exactly as the wire spells it (unknown_field);
//   - no key appears twice in an object, also not in another case (duplicate_key);
//   - values have the field's type and only pointer fields may be null; times
//     follow ParseTime (invalid_fire_at for fire_at, invalid_request otherwise);
//   - more than limit bytes is body_too_large (413).
//
// An absent field is not an error: it keeps its zero value (a zero Time for a
// missing fire_at), and checking that required fields are present is the
// handler's job. On failure v is left untouched.
func Decode(body io.Reader, limit int64, v any) *Error {
	if e := checkTarget(v); e != nil {
		return e
	}
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "body exceeds %d bytes", limit)
		}
		return BadRequest(CodeInvalidRequest, "reading body: %v", err)
	}
	if int64(len(data)) > limit {
		return Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "body exceeds %d bytes", limit)
	}
	return DecodeBytes(data, v)
}

// DecodeBytes applies Decode's rules to data already read.
func DecodeBytes(data []byte, v any) *Error {
	if e := checkTarget(v); e != nil {
		return e
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return BadRequest(CodeInvalidJSON, "body is empty; want a JSON object")
	}
	if !json.Valid(data) {
		// Valid JSON followed by more is "trailing data"; anything else is not JSON.
		dec := json.NewDecoder(bytes.NewReader(data))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == nil {
			return BadRequest(CodeTrailingData, "unexpected data after the JSON value")
		}
		return BadRequest(CodeInvalidJSON, "body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if e := walkValue(dec, reflect.TypeOf(v).Elem(), ""); e != nil {
		return e
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest(CodeTrailingData, "unexpected data after the JSON value")
	}
	target := reflect.New(reflect.TypeOf(v).Elem())
	if err := json.Unmarshal(data, target.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return BadRequest(CodeInvalidRequest, "%s: must be %s", fieldName(te.Field), jsonKind(te.Type))
		}
		return BadRequest(CodeInvalidRequest, "%v", err)
	}
	reflect.ValueOf(v).Elem().Set(target.Elem())
	return nil
}

// checkTarget refuses a decode target that is not a non-nil pointer: a
// programming error, answered as a 500.
func checkTarget(v any) *Error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return Errorf(http.StatusInternalServerError, CodeServerError, "decode target must be a non-nil pointer")
	}
	return nil
}

var timeType = reflect.TypeOf(Time{})

// walkValue consumes one JSON value from dec, checking it against type t.
func walkValue(dec *json.Decoder, t reflect.Type, path string) *Error {
	// Only pointers and interfaces may be null: json.Unmarshal would silently
	// leave any other field (a string, a slice, the whole body) at its zero value.
	nullable := t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return BadRequest(CodeInvalidJSON, "body is not valid JSON")
	}
	if t == timeType {
		s, ok := tok.(string)
		code := CodeInvalidRequest
		if strings.HasSuffix(path, "fire_at") {
			code = CodeInvalidFireAt
		}
		if !ok {
			return BadRequest(code, "%s: must be an RFC 3339 string, not %s", fieldName(path), tokenKind(tok))
		}
		if _, err := ParseTime(s); err != nil {
			return BadRequest(code, "%s: %v", fieldName(path), err)
		}
		return nil
	}
	if tok == nil && !nullable {
		return BadRequest(CodeInvalidRequest, "%s: must be %s, not null", fieldName(path), jsonKind(t))
	}
	delim, isDelim := tok.(json.Delim)
	if !isDelim {
		return nil // scalars: types are checked by json.Unmarshal
	}
	switch delim {
	case '{':
		var fields map[string]reflect.Type
		if t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return BadRequest(CodeInvalidJSON, "body is not valid JSON")
			}
			key, _ := kt.(string)
			folded := strings.ToLower(key)
			if prev, dup := seen[folded]; dup {
				return BadRequest(CodeDuplicateKey, "key %q appears more than once (also as %q)", truncate(key, 64), truncate(prev, 64))
			}
			seen[folded] = key
			child := reflect.TypeOf((*any)(nil)).Elem()
			switch t.Kind() {
			case reflect.Struct:
				ft, ok := fields[key]
				if !ok {
					return BadRequest(CodeUnknownField, "unknown field %q%s", truncate(key, 64), suggest(fields, key))
				}
				child = ft
			case reflect.Map:
				child = t.Elem()
			}
			if e := walkValue(dec, child, join(path, key)); e != nil {
				return e
			}
		}
		_, _ = dec.Token() // '}'
	case '[':
		child := reflect.TypeOf((*any)(nil)).Elem()
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			child = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if e := walkValue(dec, child, fmt.Sprintf("%s[%d]", path, i)); e != nil {
				return e
			}
		}
		_, _ = dec.Token() // ']'
	}
	return nil
}

// jsonFields maps the wire names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = f.Type
	}
	return out
}

func suggest(fields map[string]reflect.Type, key string) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", name)
		}
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldName(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case json.Delim:
		return "an object or array"
	default:
		return "a string"
	}
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
