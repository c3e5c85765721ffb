package kafkaconn

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The embedded broker keeps its log in a directory of its own, private to this user (0700),
// under the user's cache directory rather than a predictable world-readable /tmp path; one
// left with looser rights by an older version is tightened.
func TestEmbeddedDirIsPrivate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	dir, err := EmbeddedDir("127.0.0.1:9092")
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
	again, err := EmbeddedDir("127.0.0.1:9092")
	if err != nil || again != dir {
		t.Fatalf("second start: %s, %v; want the same directory %s", again, err, dir)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("a 0755 broker dir is left %v, want 0700", st.Mode().Perm())
	}
}

// The deployment's login is made once, by whichever binary asks first (even at the same
// time), kept 0600, and every later ask gets the same; KAFKA_USERNAME/KAFKA_PASSWORD win.
func TestEmbeddedLoginIsSharedPerDeployment(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	got := make([]Security, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := EmbeddedLogin(dir, Security{})
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		}()
	}
	wg.Wait()
	first := got[0]
	if first.Mechanism != EmbeddedMechanism || first.Username == "" || len(first.Password) < 32 {
		t.Fatalf("login %+v: want %s with a user and a long random password", first, EmbeddedMechanism)
	}
	for _, s := range got[1:] {
		if s != first {
			t.Fatalf("two logins for one deployment: %+v and %+v", first, s)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "credentials.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, mode %v; want 0600", err, st.Mode())
	}
	if other, _ := EmbeddedLogin(t.TempDir(), Security{}); other.Password == first.Password {
		t.Fatal("two deployments share a password")
	}
	set, err := EmbeddedLogin(dir, Security{Mechanism: "PLAIN", Username: "ops", Password: "pw"})
	if err != nil || set != (Security{Mechanism: "PLAIN", Username: "ops", Password: "pw"}) {
		t.Fatalf("a configured login: %+v, %v; want it as set", set, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "credentials.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EmbeddedLogin(dir, Security{}); err == nil {
		t.Fatal("an unreadable credentials file was accepted")
	}
}
