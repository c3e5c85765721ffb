// Package exactlyonce runs flashsale's Redis scripts (lua/) so each call takes effect once: a
// re-send after a timeout or a dropped connection is safe (once.go), and a state change can wait
// until the replicas hold it (replicas.go). A script's owner declares it with New or NewChange
// and wraps it in one typed function; nobody else builds its KEYS and ARGV.
package exactlyonce

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

func source(name string) string {
	b, err := lua.FS.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("lua: missing embedded script %s: %v", name, err))
	}
	return string(b)
}

// concat joins the named embedded files in order.
func concat(names ...string) string {
	var body strings.Builder
	for _, n := range names {
		body.WriteString(source(n))
		body.WriteString("\n")
	}
	return body.String()
}

var all = map[string]*Script{}

// New builds a script from embedded files (concatenated in order) and registers it, so Load
// preloads it and metrics can name it.
func New(name string, files ...string) *Script { return Register(name, concat(files...)) }

// NewChange is New for a script whose run is a state change a client is answered for (a
// purchase, a payment, a restock...): through a client that requires replicas
// (RequireReplicas), its run is acknowledged only once they hold it (replicas.go).
func NewChange(name string, files ...string) *Script {
	s := New(name, files...)
	s.change = true
	return s
}

// NewIdempotent builds a script whose run is harmless to repeat on its own (a read, a
// conditional delete) and registers it like New, without the call record: the record would be
// one more write per run, and for a read-only script (`#!lua flags=no-writes`) a refused one.
// Run re-sends it like any other script; it never waits for replicas.
func NewIdempotent(name string, files ...string) *Script {
	s := &Script{name: name, rs: redis.NewScript(concat(files...)), bare: true}
	all[name] = s
	return s
}

// Bare builds a script from embedded files without the call record, unregistered: only for
// benchmarks that measure what the record costs.
func Bare(files ...string) *redis.Script { return redis.NewScript(concat(files...)) }

// Register puts src inside the call-record wrapper (once.lua), so a re-sent call answers from
// its record instead of running twice, and registers it under name.
func Register(name, src string) *Script {
	before, after, ok := strings.Cut(source("lib/once.lua"), "--[[ script ]]")
	if !ok {
		panic("lua: once.lua has no --[[ script ]] marker")
	}
	s := &Script{name: name, rs: redis.NewScript(before + src + "\n" + after)}
	all[name] = s
	return s
}

// Hashes returns every registered script's SHA1 by script name, so instrumentation can name
// the script behind an EVALSHA.
func Hashes() map[string]string {
	out := make(map[string]string, len(all))
	for name, s := range all {
		out[name] = s.Hash()
	}
	return out
}

// Load preloads every script with SCRIPT LOAD (on every master of a cluster), so pipelined
// EVALSHA can be used and readiness can report "scripts loaded".
func Load(ctx context.Context, rdb redis.UniversalClient) error {
	for name, s := range all {
		if err := s.rs.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("lua: load %s: %w", name, err)
		}
	}
	return nil
}

// Loaded reports whether every script is in the server's script cache.
func Loaded(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	for _, s := range all {
		ok, err := s.rs.Exists(ctx, rdb).Result()
		if err != nil {
			return false, err
		}
		for _, b := range ok {
			if !b {
				return false, nil
			}
		}
	}
	return true, nil
}
