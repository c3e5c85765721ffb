package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestUnknownVariablesNameTheNearest(t *testing.T) {
	got := UnknownVariables([]string{
		"FLASHSALE_REDIS_ADDR=127.0.0.1:7000",      // one edit from FLASHSALE_REDIS_ADDRS
		"FLASHSALE_HTTP_ADRR=:8080",                // two (a swap)
		"FLASHSALE_TOTALLY_NEW=1",                  // nothing near
		"FLASHSALE_REDIS_ADDRS=127.0.0.1:6379",     // known
		"FLASHSALE_PAYMENT_SIM_API_KEYS=sk_test_x", // the simulator's own: known
		"PATH=/bin", "KAFKA_BROKERS=x",
	})
	want := []string{
		"FLASHSALE_HTTP_ADRR is not a flashsale variable and is ignored; did you mean FLASHSALE_HTTP_ADDR?",
		"FLASHSALE_REDIS_ADDR is not a flashsale variable and is ignored; did you mean FLASHSALE_REDIS_ADDRS?",
		"FLASHSALE_TOTALLY_NEW is not a flashsale variable and is ignored",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "abc", 0}, {"abc", "abd", 1}, {"abc", "ab", 1}, {"ab", "ba", 2}, {"kitten", "sitting", 3}, {"abcdefgh", "a", 4}} {
		if got := editDistance(c.a, c.b, 4); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Every FLASHSALE_* variable the repository's Go code names is known, so none of them is
// ever warned about as a misspelling.
func TestEveryVariableInTheSourcesIsKnown(t *testing.T) {
	known := Known()
	re := regexp.MustCompile(`"(FLASHSALE_[A-Z0-9_]*[A-Z0-9])"`)
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(known, m[1]) {
				t.Errorf("%s reads %s, which config.Known does not list", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMalformedPostgresDSNIsAnInvalidSetting(t *testing.T) {
	for _, dsn := range []string{"postgres://u:secret@host:99999/db", "host=x port=abc password=secret", "nonsense"} {
		_, err := Parse(func(k string) string {
			if k == "FLASHSALE_POSTGRES_DSN" {
				return dsn
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "FLASHSALE_POSTGRES_DSN") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: %v", dsn, err)
		}
	}
}
