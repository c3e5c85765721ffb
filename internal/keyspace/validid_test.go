package keyspace

import (
	"regexp"
	"strings"
	"testing"
)

// ValidID is a hand loop for speed; it must accept exactly what the contract's pattern does.
func TestValidIDMatchesTheContractPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	cases := []string{"", "a", "Z9", "phone-1_X", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"a b", "a.b", "a:b", "{a}", "é", "a\n", "\x00", "-", "_", "a/b", "ab%", "A-Z_a-z_0-9"}
	for c := 0; c < 256; c++ {
		cases = append(cases, string(rune(c)), "x"+string([]byte{byte(c)}))
	}
	for _, s := range cases {
		if got, want := ValidID(s), pattern.MatchString(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestExpiryEntry: every member form the expiry index holds, and what it must refuse.
func TestExpiryEntry(t *testing.T) {
	for _, c := range []struct {
		member      string
		item        string
		first, last uint64
		ok          bool
	}{
		{"x.7", "x", 7, 7, true},
		{"x.1-256", "x", 1, 256, true},
		{"it-em_2.10-12", "it-em_2", 10, 12, true},
		{"x.1-257", "", 0, 0, false}, // more than one purchase batch's 256 orders
		{"x.5-4", "", 0, 0, false},
		{"x.5-", "", 0, 0, false},
		{"x.-5", "", 0, 0, false},
		{"x.", "", 0, 0, false},
		{"x", "", 0, 0, false},
		{".5", "", 0, 0, false},
		{"x.1a", "", 0, 0, false},
		{"x.1-2-3", "", 0, 0, false},
		{"x.111111111111111111111", "", 0, 0, false},
	} {
		item, first, last, ok := ExpiryEntry(c.member)
		if item != c.item || first != c.first || last != c.last || ok != c.ok {
			t.Errorf("ExpiryEntry(%q) = %q %d %d %v, want %q %d %d %v", c.member, item, first, last, ok, c.item, c.first, c.last, c.ok)
		}
	}
}
