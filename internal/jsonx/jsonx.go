// Package jsonx appends the JSON of strings and times exactly as encoding/json writes them,
// without reflection: the pieces of the hand-written encoders on hot paths (the relay's
// events, the catalogue's cached bodies), which their tests compare with encoding/json.
package jsonx

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// AppendString appends s as a JSON string the way encoding/json does (HTML-safe escapes); the
// rare string that needs escaping goes through encoding/json itself.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendTime appends t as time.Time.MarshalJSON does (RFC 3339 with the nanoseconds needed).
func AppendTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		j, _ := json.Marshal(t) // encoding/json's own error path; never for our times
		return append(b, j...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
