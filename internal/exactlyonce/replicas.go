package exactlyonce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A state change is acknowledged only once the replicas a client requires hold it (a replica
// promoted before it received a change has lost it). Run and RunEach of a NewChange script refuse
// the call when the primary has too few live replicas, else pipeline the script and a WAIT on
// its connection: one round trip (docs/design.md, "Replication and failover").

// ErrTooFewReplicas refuses a state change before it runs: the primary has fewer live
// replicas than the client requires, so the change could not be confirmed.
var ErrTooFewReplicas = errors.New("a Redis replica that must hold the change is not connected to the primary (FLASHSALE_REDIS_ACK_REPLICAS); nothing was changed, try again")

// ErrPrimaryUnconfirmed refuses a state change before it runs: the node this client reaches is
// not confirmed as the primary (no majority of the Sentinels named it within the lease, or
// they name another; a cluster master cut off from the majority).
var ErrPrimaryUnconfirmed = errors.New("the Redis primary is not confirmed (FLASHSALE_REDIS_SENTINEL_LEASE); nothing was changed, try again")

// ErrNotReplicated means a change ran on the primary but WAIT did not confirm that the
// required replicas hold it in time: it may be lost in a failover. It is an ErrOutcomeUnknown.
var ErrNotReplicated = fmt.Errorf("the Redis replicas did not confirm the change in time: %w", ErrOutcomeUnknown)

// Replicas is what a client's state changes must reach before they are acknowledged;
// redisconn implements it from its watch of the primaries.
type Replicas interface {
	// Admit returns how many replicas must hold a change of key before it is acknowledged
	// (0: none), or an error wrapping ErrTooFewReplicas or ErrPrimaryUnconfirmed when the
	// change must be refused before it runs. It must be cheap (no Redis call).
	Admit(ctx context.Context, key string) (int, error)
	// Timeout is how long WAIT waits for them.
	Timeout() time.Duration
	// Confirms reports whether changes may have to wait for replicas at all.
	Confirms() bool
}

var required sync.Map // redis.Scripter (a client) -> Replicas

// RequireReplicas makes every state change (NewChange scripts) run through rdb wait for r's
// replicas; nil stops it. redisconn calls it for the clients it opens.
func RequireReplicas(rdb redis.Scripter, r Replicas) {
	if r == nil {
		required.Delete(rdb)
		return
	}
	required.Store(rdb, r)
}

// RequiresReplicas reports whether state changes through rdb may wait for replicas.
func RequiresReplicas(rdb redis.Scripter) bool {
	v, ok := required.Load(rdb)
	return ok && v.(Replicas).Confirms()
}

// replicas returns what admits a call of s through rdb, or nil for nothing.
func (s *Script) replicas(rdb redis.Scripter) Replicas {
	if !s.change {
		return nil
	}
	v, ok := required.Load(rdb)
	if !ok {
		return nil
	}
	return v.(Replicas)
}

// pipeliner is a client that pipelines on one connection (a node's *redis.Client).
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// primaryFor returns the client of the primary that serves key: a cluster's master for the
// key's slot, or rdb itself. WAIT must reach the connection that ran the script.
func primaryFor(ctx context.Context, rdb redis.Scripter, key string) (pipeliner, error) {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		return node, nil
	case pipeliner:
		return c, nil
	}
	return nil, fmt.Errorf("%w: replicas are required but the client cannot pipeline", errNotSent)
}

// errNotSent marks a failure before anything was sent.
var errNotSent = errors.New("not sent")

// runAcked sends one call and a WAIT behind it on the connection of the key's primary, and
// returns the script's reply once WAIT confirmed it, or the script's error, ErrNotReplicated, or
// a transport error (re-sendable: the re-send touches the call record, so its WAIT covers the
// recorded run).
func (s *Script) runAcked(ctx context.Context, rdb redis.Scripter, n int, timeout time.Duration, keys []string, args []any, ride func(context.Context, redis.Pipeliner)) *redis.Cmd {
	// Riders (RunWith) go between the script and WAIT when one node serves every key; on a
	// cluster, in a pipeline of their own sent at the same time.
	if c, ok := rdb.(*redis.ClusterClient); ok && ride != nil {
		done := make(chan struct{})
		go func(ride func(context.Context, redis.Pipeliner)) {
			defer close(done)
			pipe := c.Pipeline()
			ride(ctx, pipe)
			_, _ = pipe.Exec(ctx) // blind: each command holds its own reply or error
		}(ride)
		defer func() { <-done }()
		ride = nil // the riders went in their own pipeline, not behind the script
	}
	for moved := 0; ; moved++ {
		node, err := primaryFor(ctx, rdb, keys[0])
		if err != nil {
			return redis.NewCmdResult(nil, err)
		}
		cmd, wait := s.sendAcked(ctx, node, n, timeout, keys, args, false, ride)
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") { // nothing ran: again with the body
			cmd, wait = s.sendAcked(ctx, node, n, timeout, keys, args, true, ride)
		}
		err = cmd.Err()
		if redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
			// The slot has a new master (a failover): nothing ran. Ask the cluster again.
			c, _ := rdb.(*redis.ClusterClient)
			if c == nil || moved >= 5 || ctx.Err() != nil {
				return redis.NewCmdResult(nil, fmt.Errorf("%w: %w", errNotSent, err))
			}
			c.ReloadState(ctx)
			select {
			case <-time.After(backoff(moved)):
			case <-ctx.Done():
			}
			continue
		}
		if err != nil {
			return cmd
		}
		confirmed, err := wait.Int64()
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			return redis.NewCmdResult(nil, err) // transport: re-send
		}
		if err != nil || confirmed < int64(n) {
			return redis.NewCmdResult(nil, fmt.Errorf("%w (WAIT: %d of %d replicas within %s, %v)", ErrNotReplicated, confirmed, n, timeout, err))
		}
		return cmd
	}
}

// sendAcked pipelines the script (by hash, or with its body), ride's commands (if any) and
// WAIT on node's connection.
func (s *Script) sendAcked(ctx context.Context, node pipeliner, n int, timeout time.Duration, keys []string, args []any, withBody bool, ride func(context.Context, redis.Pipeliner)) (*redis.Cmd, *redis.Cmd) {
	pipe := node.Pipeline()
	var cmd *redis.Cmd
	if withBody {
		cmd = s.rs.Eval(ctx, pipe, keys, args...)
	} else {
		cmd = s.rs.EvalSha(ctx, pipe, keys, args...)
	}
	if ride != nil {
		ride(ctx, pipe)
	}
	wait := pipe.Do(ctx, "WAIT", n, timeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	return cmd, wait
}

// WaitBehind sends the commands add puts and, behind them on the primary's connection, a WAIT
// for the replicas rdb requires: confirmed means they hold the commands' write and all before
// it (true with none required, false with too few live). Not for a blocking command: its WAIT
// offset stays where it blocked. err is a failure before anything was sent.
func WaitBehind(ctx context.Context, rdb redis.Scripter, key string, add func(redis.Pipeliner)) (confirmed bool, err error) {
	v, ok := required.Load(rdb)
	n, timeout, admitted := 0, time.Duration(0), true
	if ok {
		var aerr error
		n, aerr = v.(Replicas).Admit(ctx, key)
		timeout, admitted = v.(Replicas).Timeout(), aerr == nil
	}
	if !admitted {
		n = 1 // refused: the commands go alone, unconfirmed
	}
	wait := n > 0 && admitted
	node, err := primaryFor(ctx, rdb, key)
	if err != nil {
		return false, err
	}
	pipe := node.Pipeline()
	add(pipe)
	var acked *redis.Cmd
	if wait {
		acked = pipe.Do(ctx, "WAIT", n, timeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	if n < 1 {
		return true, nil
	}
	if !wait {
		return false, nil
	}
	got, err := acked.Int64()
	return err == nil && got >= int64(n), nil
}
