package metrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is 1, labelled with what this binary was built from, so a dashboard can say
// which version runs where (and a mixed fleet during a deploy shows): the module version,
// the Go version, and the VCS commit stamped by `go build` (with "-dirty" when the work tree
// had changes; "unknown" when the build had no VCS information).
var BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "flashsale_build_info",
	Help: "Always 1; the labels say what this binary was built from: version, goversion and commit.",
}, []string{"version", "goversion", "commit"})

func init() {
	version, goVersion, commit := buildLabels()
	BuildInfo.WithLabelValues(version, goVersion, commit).Set(1)
	Registry.MustRegister(BuildInfo)
}

func buildLabels() (version, goVersion, commit string) {
	version, goVersion, commit = "unknown", "unknown", "unknown"
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
