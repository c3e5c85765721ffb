package jsonx

import (
	"encoding/json"
	"testing"
	"time"
)

func TestAppendIsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "not enough stock left", `quote " and \ slash`, "<html>&amp;",
		"tab\tnew\nline", "ünïcödé", "\u2028\u2029", "bad utf8 \xff\xfe", "\x00\x1f", "é ü 日本"} {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}
	for _, tm := range []time.Time{
		time.Unix(0, 0).UTC(), time.Date(2026, 11, 24, 7, 30, 0, 123_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		want, _ := json.Marshal(tm)
		if got := AppendTime(nil, tm); string(got) != string(want) {
			t.Errorf("AppendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}
