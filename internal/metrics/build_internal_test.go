package metrics

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuildLabelsPreferTheStampedVersion: the version and commit set with -ldflags -X (by
// make build and the Dockerfile) are the labels; without them the version is the module's,
// "(devel)" for a plain build, never empty.
func TestBuildLabelsPreferTheStampedVersion(t *testing.T) {
	v, gov, c := buildLabels("v1.4.0-3-g1a2b3c4-dirty", "1a2b3c4d")
	if v != "v1.4.0-3-g1a2b3c4-dirty" || c != "1a2b3c4d" || !strings.HasPrefix(gov, "go") {
		t.Fatalf("stamped: version %q commit %q go %q", v, c, gov)
	}
	if v, _, c := buildLabels("", ""); v == "" || c == "" {
		t.Fatalf("unstamped: version %q commit %q, want (devel)/unknown at worst", v, c)
	}
}

// TestMakeBuildStampsGitDescribe: make build passes git describe's version and the commit to
// the linker.
func TestMakeBuildStampsGitDescribe(t *testing.T) {
	describe, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v (the test runs in a git work tree)", err)
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "build").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	want := "internal/metrics.Version=" + strings.TrimSpace(string(describe))
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "internal/metrics.Commit=") {
		t.Fatalf("make build does not stamp %q:\n%s", want, out)
	}
}
