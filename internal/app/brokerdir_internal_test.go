package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded broker keeps its log in a directory of its own, private to this user (0700),
// under the user's cache directory rather than a predictable world-readable /tmp path; one
// left with looser rights by an older version is tightened.
func TestBrokerDirIsPrivate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	dir, err := brokerDir("127.0.0.1:9092")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, cache+string(filepath.Separator)) || strings.Contains(filepath.Base(dir), ":") {
		t.Fatalf("broker dir %s: want a directory under the user's cache %s", dir, cache)
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("broker dir %s: %v, mode %v, want a directory with mode 0700", dir, err, st.Mode())
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := brokerDir("127.0.0.1:9092")
	if err != nil || again != dir {
		t.Fatalf("second start: %s, %v; want the same directory %s", again, err, dir)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("a 0755 broker dir is left %v, want 0700", st.Mode().Perm())
	}
}
