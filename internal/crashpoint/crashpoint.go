// Package crashpoint lets the fault tests kill a real process at a named point, as a power cut
// would: FLASHSALE_CRASH_POINT=<name>[:<n>] SIGKILLs it once n events (default 1) passed there.
// Unset, a point costs one comparison. Points: relay-after-publish (Kafka has the batch, Redis
// not yet), consumer-after-commit (Postgres has it, Kafka offsets not yet).
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

var (
	name  string
	at    int64
	count atomic.Int64
)

func init() {
	v := os.Getenv("FLASHSALE_CRASH_POINT")
	if v == "" {
		return
	}
	n, times, _ := strings.Cut(v, ":")
	name, at = n, 1
	if times != "" {
		if x, err := strconv.ParseInt(times, 10, 64); err == nil && x > 0 {
			at = x
		}
	}
}

// Enabled reports whether the process was told to crash at point p.
func Enabled(p string) bool { return name != "" && name == p }

// Reached counts events passing point p and kills the process once the configured number
// has passed.
func Reached(p string, events int) {
	if name == "" || name != p {
		return
	}
	if n := count.Add(int64(events)); n >= at {
		fmt.Fprintf(os.Stderr, "crashpoint: killing the process at %s after %d events\n", p, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
