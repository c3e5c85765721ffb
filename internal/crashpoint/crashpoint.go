// Package crashpoint lets the fault tests kill a real process at a named point in its work,
// as a power cut would: FLASHSALE_CRASH_POINT=<name>[:<n>] makes the process SIGKILL itself
// the n-th time (default 1st) it reaches that point. It is a test hook; unset (always, in
// production) a point costs one comparison. Points: relay-after-publish (Kafka acknowledged
// a batch, Redis not yet), consumer-after-commit (Postgres committed a batch, Kafka offsets
// not yet).
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

// Reached counts a pass through point p and kills the process on the configured pass.
func Reached(p string) {
	if name == "" || name != p {
		return
	}
	if count.Add(1) == at {
		fmt.Fprintf(os.Stderr, "crashpoint: killing the process at %s (pass %d)\n", p, at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
