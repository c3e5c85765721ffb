package app

import (
	"log/slog"
	"net"
	"net/netip"
	"syscall"

	"github.com/flashsale/flashsale/internal/config"
)

// Every connection is a file descriptor, and an api out of descriptors accepts nothing,
// /healthz and purchases included. So the api raises its own open-file limit to the hard
// limit at start, caps its connections to what the limit leaves once a reserve is kept for
// Redis, Kafka and files, and caps catalogue streams below that.

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

// connShare is the most connections a limit of fds descriptors allows: all but a reserve of
// an eighth, and at least 128, for Redis, Kafka, the ops listener and files.
func connShare(fds uint64) int {
	reserve := max(fds/8, 128)
	if fds <= reserve {
		return 1
	}
	return int(min(fds-reserve, 1<<30))
}

// opsConns caps the FLASHSALE_OPS_ADDR listener (probes and scrapes, a handful at a time).
const opsConns = 64

// connCaps are the HTTP listener's caps: FLASHSALE_HTTP_MAX_CONNS (no more than the
// descriptors allow) or the descriptors' share, and FLASHSALE_HTTP_MAX_CONNS_PER_CLIENT, which
// proxies of FLASHSALE_TRUSTED_PROXIES are exempt from.
func connCaps(cfg config.Config) ConnCaps {
	caps := ConnCaps{Max: cfg.HTTPMaxConns, PerClient: cfg.HTTPMaxConnsPerIP, Trusted: trustedPeers(cfg.TrustedProxies)}
	if fds := fileLimit(); fds > 0 {
		share := connShare(fds)
		if caps.Max == 0 || caps.Max > share {
			if caps.Max > share {
				slog.Warn("FLASHSALE_HTTP_MAX_CONNS lowered to fit the open-file limit", "open_file_limit", fds, "max_conns", share, "configured", caps.Max)
			}
			caps.Max = share
		}
	}
	if caps.Max == 0 {
		caps.Max = 10_000
	}
	return caps
}

// streamRoom is the most catalogue streams caps leave: the connections heavy addresses may
// hold, less a sixteenth, so a stream over the cap still gets its connection and a 503 with
// Retry-After rather than a closed socket.
func streamRoom(caps ConnCaps) int { return max(1, caps.Open()-caps.Max/16) }

// capStreams lowers the configured cap on streams in all to what the connection caps leave.
func capStreams(configured int, caps ConnCaps) int {
	if room := streamRoom(caps); room < configured {
		slog.Info("catalogue streams capped by the connection cap", "max_conns", caps.Max, "stream_max", room, "configured", configured)
		return room
	}
	return configured
}

// trustedPeers reports the addresses of FLASHSALE_TRUSTED_PROXIES (IPs or CIDR ranges, checked
// by config).
func trustedPeers(proxies []string) func(netip.Addr) bool {
	var nets []netip.Prefix
	for _, p := range proxies {
		if pf, err := netip.ParsePrefix(p); err == nil {
			nets = append(nets, pf.Masked())
		} else if a, err := netip.ParseAddr(p); err == nil {
			nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else if ip := net.ParseIP(p); ip != nil {
			a, _ := netip.AddrFromSlice(ip)
			nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	if len(nets) == 0 {
		return nil
	}
	return func(a netip.Addr) bool {
		for _, n := range nets {
			if n.Contains(a) {
				return true
			}
		}
		return false
	}
}
