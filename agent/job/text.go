package job

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// CheckText reports the first string of j (its id, name, schedule, payload:
// command, arguments, environment, URL, headers, body, and every other text
// field) that is not valid UTF-8. Such text cannot be stored: JSON would keep
// U+FFFD in its place, and the job would run something other than what was
// asked.
func (j *Job) CheckText() error {
	if path, ok := invalidText(reflect.ValueOf(j), "job"); ok {
		return fmt.Errorf("%s is not valid UTF-8 text", path)
	}
	return nil
}

// invalidText walks v and returns the path of the first string (or map key)
// that is not valid UTF-8.
func invalidText(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return invalidText(v.Elem(), path)
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path, true
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "" || name == "-" {
				name = f.Name
			}
			if f.Anonymous {
				name = ""
			}
			sub := path
			if name != "" {
				sub += "." + name
			}
			if p, bad := invalidText(v.Field(i), sub); bad {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // raw bytes, not text
		}
		for i := range v.Len() {
			if p, bad := invalidText(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); bad {
				return p, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return path + " (a key)", true
			}
			if p, bad := invalidText(iter.Value(), fmt.Sprintf("%s[%q]", path, k.String())); bad {
				return p, true
			}
		}
	}
	return "", false
}
