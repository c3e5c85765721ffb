package metrics

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
)

// InstrumentRedis adds a hook to rdb that counts and times every Lua script call by script
// name. Call it after every package has registered its scripts (in main, after imports ran).
func InstrumentRedis(rdb redis.UniversalClient) {
	rdb.AddHook(newScriptHook(exactlyonce.Hashes()))
}

// scriptHook names EVALSHA/EVAL commands by the registered script they run. The sha -> name
// map is fixed at creation; a script nobody registered is labelled "unknown" so label values
// stay bounded.
type scriptHook struct {
	names map[string]string // sha1 hex -> script name
}

func newScriptHook(byName map[string]string) *scriptHook {
	h := &scriptHook{names: make(map[string]string, len(byName))}
	for name, sha := range byName {
		h.names[sha] = name
	}
	return h
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name, ok := h.scriptName(cmd)
		if !ok {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		ScriptDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		// The returned error, not cmd.Err(): go-redis sets the command's error after the hooks.
		ScriptCalls.WithLabelValues(name, result(err)).Inc()
		return err
	}
}

// ProcessPipelineHook counts each script call of a pipeline; the latency of one call inside a
// pipeline cannot be told apart, so the pipeline's round trip is observed once per script.
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		var seen map[string]bool
		for _, cmd := range cmds {
			name, ok := h.scriptName(cmd)
			if !ok {
				continue
			}
			ScriptCalls.WithLabelValues(name, result(cmd.Err())).Inc()
			if !seen[name] {
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[name] = true
				ScriptDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
			}
		}
		return err
	}
}

// scriptName reports whether cmd runs a script and which one: EVALSHA names it by SHA1,
// EVAL by its body (hashed the way Redis does).
func (h *scriptHook) scriptName(cmd redis.Cmder) (string, bool) {
	args := cmd.Args()
	if len(args) < 2 {
		return "", false
	}
	var sha string
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "evalsha_ro":
		sha, _ = args[1].(string)
	case "eval", "eval_ro":
		body, _ := args[1].(string)
		sum := sha1.Sum([]byte(body))
		sha = hex.EncodeToString(sum[:])
	default:
		return "", false
	}
	if name, ok := h.names[strings.ToLower(sha)]; ok {
		return name, true
	}
	return "unknown", true
}

func result(err error) string {
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return "ok"
	case strings.HasPrefix(err.Error(), "NOSCRIPT"):
		return "noscript"
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return "unavailable"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return "error"
	}
	return "unavailable"
}
