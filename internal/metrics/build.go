package metrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version and Commit are what `git describe --tags --always --dirty` and `git rev-parse HEAD`
// said when the binary was built, set with -ldflags -X by `make build` (and so `make run`)
// and the Dockerfile, whose build context has no .git for go build to stamp from.
var Version, Commit string

// BuildInfo is 1, labelled with what this binary was built from, so a dashboard shows which
// version runs where: Version (else the module version, "(devel)" for a plain go build), the Go
// version, and Commit (else the VCS commit go build stamped, "-dirty" for a changed work tree;
// "unknown" without VCS information).
var BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "flashsale_build_info",
	Help: "Always 1; the labels say what this binary was built from: version, goversion and commit.",
}, []string{"version", "goversion", "commit"})

func init() {
	version, goVersion, commit := buildLabels(Version, Commit)
	BuildInfo.WithLabelValues(version, goVersion, commit).Set(1)
	Registry.MustRegister(BuildInfo)
}

// buildLabels are BuildInfo's labels, the linker's values (stamped) first.
func buildLabels(stampedVersion, stampedCommit string) (version, goVersion, commit string) {
	version, goVersion, commit = "(devel)", "unknown", "unknown"
	defer func() {
		if stampedVersion != "" {
			version = stampedVersion
		}
		if stampedCommit != "" {
			commit = stampedCommit
		}
	}()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goVersion = bi.GoVersion
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && commit != "unknown" {
		commit += "-dirty"
	}
	return
}
