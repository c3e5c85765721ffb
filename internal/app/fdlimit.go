package app

import (
	"log/slog"
	"syscall"
)

// Every catalogue stream holds a connection, and a connection is a file descriptor: an api out
// of descriptors accepts nothing, /healthz and purchases included. So the api raises its own
// open-file limit to the hard limit at start, and caps streams to what the limit leaves once a
// reserve is kept for everything else.

// fileLimit raises the soft RLIMIT_NOFILE to the hard one and returns the soft limit then in
// force (0 when it cannot be read).
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur
}

// streamShare is the most streams a limit of fds descriptors allows: all but a reserve of an
// eighth, and at least 128, for the listener's other connections, Redis, Kafka and files.
func streamShare(fds uint64) int {
	reserve := max(fds/8, 128)
	if fds <= reserve {
		return 1
	}
	return int(min(fds-reserve, 1<<30))
}

// capStreams lowers the configured cap on streams in all to the descriptors' share.
func capStreams(configured int) int {
	fds := fileLimit()
	if fds == 0 {
		return configured
	}
	share := streamShare(fds)
	if share < configured {
		slog.Info("catalogue streams capped by the open-file limit", "open_file_limit", fds, "stream_max", share, "configured", configured)
		return share
	}
	return configured
}
