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
