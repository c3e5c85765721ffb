package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// readBody reads at most limit bytes of the request body; more is errTooLarge.
func readBody(c *gin.Context, limit int64) ([]byte, error) {
	if c.Request.ContentLength > limit {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge
	}
	if err != nil {
		return nil, errInvalid("could not read the request body")
	}
	return b, nil
}

// decodeJSON strictly decodes one JSON object: unknown fields, trailing data and wrong
// types are 400 invalid_request.
func decodeJSON(c *gin.Context, limit int64, v any) error {
	b, err := readBody(c, limit)
	if err != nil {
		return err
	}
	return strictUnmarshal(b, v)
}

func strictUnmarshal(b []byte, v any) error {
	// JSON text is UTF-8 (RFC 8259); encoding/json would turn a bad byte into U+FFFD and save
	// a name other than the one sent.
	if !utf8.Valid(b) {
		return errInvalid("malformed JSON: the body is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errInvalid("empty body: send a JSON object")
		}
		return errInvalid(jsonMessage(err, "expected an object: the body must be a JSON object"))
	}
	// Only JSON whitespace may follow the value. (Decoder.More is no test for that: it reports
	// false before a stray '}' or ']', so `{"quantity":2}}` would pass as valid.)
	for _, c := range b[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return errInvalid("malformed JSON: trailing data after the object")
		}
	}
	// encoding/json matched names case-insensitively ({"Quantity":2} filled Quantity); JSON
	// and the contract do not: every name, nested ones too, must be one of v's exactly.
	n := nameCheck{b: b}
	return n.value(jsonNamesOf(reflect.TypeOf(v)))
}

// jsonMessage says what is wrong with JSON that encoding/json refused, in the contract's words:
// the field and what it must be, or where the syntax broke; never a Go type (encoding/json's
// "cannot unmarshal string into Go struct field .quantity of type int64"). whole is the message
// when the value as a whole has the wrong type.
func jsonMessage(err error, whole string) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return whole
		}
		return fmt.Sprintf("%s must be %s", clip(te.Field, 64), jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: it ends too soon"
	}
	// DisallowUnknownFields' error has no type of its own: `json: unknown field "colour"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + clip(name, 70)
	}
	return "malformed JSON"
}

// jsonKind names what JSON a Go type takes, as the contract would say it.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer (in range)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another kind of value"
}

// jsonNames are the exact member names a struct type accepts; each maps to the names of its
// own value when that is a struct too (nil for any other value, whose names are not checked).
type jsonNames map[string]jsonNames

var jsonNamesCache sync.Map // reflect.Type -> jsonNames

// jsonNamesOf reads t's json tags (through pointers), once per type; nil if t is no struct.
// (No embedded structs or recursive types: the request bodies have neither.)
func jsonNamesOf(t reflect.Type) jsonNames {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	if n, ok := jsonNamesCache.Load(t); ok {
		return n.(jsonNames)
	}
	names := jsonNames{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = jsonNamesOf(f.Type)
	}
	jsonNamesCache.Store(t, names)
	return names
}

// nameCheck walks JSON that encoding/json has just accepted, so it checks names, not syntax.
type nameCheck struct {
	b []byte
	i int
}

// value moves past the value at i, checking the names of an object against names (none when
// names is nil).
func (s *nameCheck) value(names jsonNames) error {
	s.space()
	switch s.b[s.i] {
	case '{':
		s.i++
		var short [8][]byte
		seen := memberNames{list: short[:0]}
		for {
			s.space()
			switch s.b[s.i] {
			case '}':
				s.i++
				return nil
			case ',':
				s.i++
				continue
			}
			start := s.i
			raw, escaped := s.str()
			name := raw // the name itself: raw with its escapes read
			if escaped {
				var n string
				_ = json.Unmarshal(s.b[start:s.i], &n) // valid: the decoder has read it
				name = []byte(n)
			}
			// encoding/json keeps the last of two equal names; a proxy or log reading the first
			// would see another request than the one we act on.
			if !seen.add(name) {
				return errInvalid(fmt.Sprintf("malformed JSON: duplicate field %q", clip(string(name), 64)))
			}
			var inner jsonNames
			if names != nil {
				var ok bool
				if inner, ok = names[string(name)]; !ok { // a map index of a converted []byte does not copy
					return errInvalid(fmt.Sprintf("malformed JSON: unknown field %q (names are case-sensitive)", clip(string(raw), 64)))
				}
			}
			s.space()
			s.i++ // ':'
			if err := s.value(inner); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for {
			s.space()
			switch s.b[s.i] {
			case ']':
				s.i++
				return nil
			case ',':
				s.i++
			default:
				if err := s.value(nil); err != nil {
					return err
				}
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null
		for s.i < len(s.b) && !strings.ContainsRune(",}] \t\n\r", rune(s.b[s.i])) {
			s.i++
		}
	}
	return nil
}

// memberNames are the names one object has shown so far (slices of the body, or of their
// unescaped copies): a short list, and a set once the object has many (an attributes map may
// have thousands), so a check is never quadratic.
type memberNames struct {
	list [][]byte
	set  map[string]struct{}
}

// add records name and reports whether it is new.
func (m *memberNames) add(name []byte) bool {
	if m.set != nil {
		if _, dup := m.set[string(name)]; dup {
			return false
		}
		m.set[string(name)] = struct{}{}
		return true
	}
	for _, n := range m.list {
		if bytes.Equal(n, name) {
			return false
		}
	}
	m.list = append(m.list, name)
	if len(m.list) > 16 {
		m.set = make(map[string]struct{}, 2*len(m.list))
		for _, n := range m.list {
			m.set[string(n)] = struct{}{}
		}
	}
	return true
}

// str moves past the string at i and returns what is between its quotes, and whether that
// holds an escape.
func (s *nameCheck) str() (raw []byte, escaped bool) {
	s.i++
	start := s.i
	for s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	s.i++
	return s.b[start : s.i-1], escaped
}

func (s *nameCheck) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}
