// Package lua embeds flashsale's Redis scripts. Each script is a .lua file here; scripts that
// rate-limit get gcra.lua prepended so the limiter has one implementation. The Go package that
// owns a script wraps it in a typed function; nobody else builds its KEYS and ARGV.
package lua

import (
	"context"
	"embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

func source(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("lua: missing embedded script %s: %v", name, err))
	}
	return string(b)
}

func script(names ...string) *redis.Script {
	var src string
	for _, n := range names {
		src += source(n) + "\n"
	}
	return redis.NewScript(src)
}

// The scripts. Run them with Script.Run, which uses EVALSHA and falls back to EVAL on NOSCRIPT
// (after a Redis restart, failover or SCRIPT FLUSH), so callers keep working without a restart.
var (
	Purchase    = script("gcra.lua", "purchase.lua")
	UpsertItem  = script("upsert_item.lua")
	AdjustStock = script("adjust_stock.lua")
)

var all = map[string]*redis.Script{}

// Register adds a script to the set that Load preloads; packages owning scripts register them.
func Register(name string, s *redis.Script) *redis.Script {
	all[name] = s
	return s
}

func init() {
	Register("purchase", Purchase)
	Register("upsert_item", UpsertItem)
	Register("adjust_stock", AdjustStock)
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

// New builds a script from embedded files (concatenated in order) and registers it.
func New(name string, files ...string) *redis.Script { return Register(name, script(files...)) }

// Load preloads every script with SCRIPT LOAD (on every master of a cluster), so pipelined
// EVALSHA can be used and readiness can report "scripts loaded".
func Load(ctx context.Context, rdb redis.UniversalClient) error {
	for name, s := range all {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("lua: load %s: %w", name, err)
		}
	}
	return nil
}

// Loaded reports whether every script is in the server's script cache.
func Loaded(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	for _, s := range all {
		ok, err := s.Exists(ctx, rdb).Result()
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
