package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
)

// A batch or a restore rides through a failover: when Redis goes away mid-run, it waits for a
// primary (failoverWait, at most failoverAttempts times) and does its work over: a batch from the
// start (it only re-emitted events, safe to send again), a restore from the item it was on
// (restore_begin.lua clears what it left). Otherwise the run stops saying so.
const (
	failoverAttempts = 3
	failoverWait     = 60 * time.Second
)

// redisGone reports whether err says Redis went away rather than answered: a broken or
// refused connection, a timeout, a node that is loading or no longer a primary, or a change
// whose outcome Redis could not confirm.
func redisGone(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, exactlyonce.ErrOutcomeUnknown) || errors.Is(err, exactlyonce.ErrTooFewReplicas)
}

// rideThrough runs step again after Redis went away, once a primary answers, up to
// failoverAttempts runs in all. what names the work for the log and the final error.
func (r *Reconciler) rideThrough(ctx context.Context, what string, step func(attempt int) error) error {
	for attempt := 1; ; attempt++ {
		err := step(attempt)
		if !redisGone(err) || ctx.Err() != nil {
			return err
		}
		if attempt == failoverAttempts {
			return fmt.Errorf("reconcile: %s: interrupted %d times by a lost connection (a Redis failover that does not settle?), giving up: %w", what, attempt, err)
		}
		slog.Warn("reconcile: Redis went away (a failover?); waiting for a primary to do the work again", "work", what, "attempt", attempt, "err", err)
		if werr := r.awaitPrimary(ctx); werr != nil {
			return fmt.Errorf("reconcile: %s: Redis went away (%w) and no primary answered within %s: %w", what, err, failoverWait, werr)
		}
	}
}

// awaitPrimary waits until Redis answers as a primary (a single node or Sentinel's: its role
// is master; a cluster: it answers), at most failoverWait.
func (r *Reconciler) awaitPrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, failoverWait)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		err := r.rdb.Ping(ctx).Err()
		if err == nil {
			if _, cluster := r.rdb.(*redis.ClusterClient); !cluster {
				var info string
				info, err = r.rdb.Info(ctx, "replication").Result()
				if err == nil && !strings.Contains(info, "role:master") {
					err = errors.New("the node answering is not a primary")
				}
			}
		}
		if err == nil {
			return nil
		}
		if perr := pause(ctx, wait); perr != nil {
			return fmt.Errorf("%w (last: %w)", perr, err)
		}
		wait = min(2*wait, time.Second)
	}
}
