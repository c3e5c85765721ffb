package exactlyonce

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrOutcomeUnknown means a call may or may not have run: it was sent, and no reply came back
// before the caller's deadline. Callers answer it as "the outcome is unknown", never as
// "nothing was changed".
var ErrOutcomeUnknown = errors.New("the outcome is unknown")

// How a call is sent. A call is re-sent after a timeout or a dropped connection until a reply
// arrives or its deadline passes; the call record (once.lua) makes every re-send safe.
const (
	// AttemptTimeout bounds one send: a healthy Redis answers any script in milliseconds, so a
	// send that waited this long is on a stalled server or a dead connection.
	AttemptTimeout = 2 * time.Second
	// CallDeadline bounds a call whose context has no earlier deadline.
	CallDeadline = 10 * time.Second
	// ClockSkew is how far this process's clock may be from Redis's. A call's deadline is
	// CallDeadline + ClockSkew by this clock; Redis refuses a send arriving later by its own and
	// keeps the call's record until then, so a late re-send is applied at most once (once.lua).
	// A clock behind Redis's by more than ClockSkew makes re-sends late: outcome unknown.
	ClockSkew = 20 * time.Second
)

// errLate is once.lua's refusal of a send that arrived after its call's deadline: that send
// did nothing, but an earlier one may have run and its record expired.
const errLate = "LATE"

// Script is one embedded script (see New).
type Script struct {
	name   string
	rs     *redis.Script
	change bool // a state change: acknowledged once the required replicas hold it (NewChange)
	bare   bool // no call record (NewIdempotent)
}

// Name is the script's registered name.
func (s *Script) Name() string { return s.name }

// Hash is the SHA1 the server knows the script by.
func (s *Script) Hash() string { return s.rs.Hash() }

// Run sends the script with a fresh call id, re-sending the same call after a timeout or a
// dropped connection (a first send that never reached Redis errs at once); past the deadline
// (at most CallDeadline) Err is ErrOutcomeUnknown. Keys share one hash tag. A change needing
// replicas answers ErrTooFewReplicas before sending, or ErrNotReplicated unconfirmed by WAIT.
func (s *Script) Run(ctx context.Context, rdb redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, rdb, keys, nil, args)
}

// RunWith is Run with blind writes riding along: ride adds commands of other slots behind the
// script's first send, in one round trip. They may run before the script (on a cluster), are
// sent whatever it answers, and a re-send after a lost reply goes without them: so only writes
// whose repetition, absence or running alone is harmless. Their replies never change the script's.
func (s *Script) RunWith(ctx context.Context, rdb redis.Scripter, keys []string, ride func(context.Context, redis.Pipeliner), args ...any) *redis.Cmd {
	return s.run(ctx, rdb, keys, ride, args)
}

func (s *Script) run(ctx context.Context, rdb redis.Scripter, keys []string, ride func(context.Context, redis.Pipeliner), args []any) *redis.Cmd {
	if len(keys) == 0 {
		return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: a script needs its keys", s.name))
	}
	n, timeout := 0, time.Duration(0)
	rep := s.replicas(rdb)
	if rep != nil {
		var err error
		if n, err = rep.Admit(ctx, keys[0]); err != nil {
			return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
		}
		timeout = rep.Timeout()
	}
	keys, args = s.record(keys, args)
	ctx, cancel := context.WithTimeout(ctx, CallDeadline)
	defer cancel()
	sent := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 && rep != nil {
			// A re-send may reach another primary (a failover): it waits for that one's
			// replicas, and is not sent while that one is refused (the first send may have run).
			var err error
			if n, err = rep.Admit(ctx, keys[0]); err != nil {
				return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrOutcomeUnknown, err))
			}
		}
		actx, acancel := context.WithTimeout(ctx, AttemptTimeout)
		var cmd *redis.Cmd
		switch {
		case n > 0:
			cmd = s.runAcked(actx, rdb, n, timeout, keys, args, firstOnly(attempt, ride))
		case ride != nil && attempt == 0:
			cmd = s.sendRiding(actx, rdb, keys, args, ride)
		default:
			cmd = s.rs.Run(actx, rdb, keys, args...)
		}
		acancel()
		err := cmd.Err()
		if errors.Is(err, ErrNotReplicated) {
			return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
		}
		if redis.HasErrorPrefix(err, errLate) {
			return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrOutcomeUnknown, err))
		}
		if err == nil || !resendable(err) {
			return cmd
		}
		sent = sent || mayHaveRun(err)
		if !sent {
			// Nothing reached Redis: the outcome is known (nothing changed), so say so now
			// rather than keep a shopper waiting on a server that is down.
			return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
		}
		resends.Add(1)
		if ctx.Err() == nil {
			select {
			case <-time.After(backoff(attempt)):
				continue
			case <-ctx.Done():
			}
		}
		return redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrOutcomeUnknown, err))
	}
}

// Call is one call of a script: its keys and arguments, as Run takes them.
type Call struct {
	Keys []string
	Args []any
}

// RunEach is Run for many calls in one pipeline, each still its own run, once in effect, with
// Run's re-sends and errors; replies are in the order of calls. Calls must not depend on one
// another's order (a re-sent one runs after later ones), and a batch must be small enough for
// Redis to answer well within AttemptTimeout.
func (s *Script) RunEach(ctx context.Context, rdb redis.UniversalClient, calls []Call) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	keys := make([][]string, len(calls))
	args := make([][]any, len(calls))
	pending := make([]int, 0, len(calls))
	rep := s.replicas(rdb)
	need := make([]int, len(calls)) // replicas each call's change must reach
	for i, c := range calls {
		if len(c.Keys) == 0 {
			out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: a script needs its keys", s.name))
			continue
		}
		if rep != nil {
			n, err := rep.Admit(ctx, c.Keys[0])
			if err != nil {
				out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
				continue
			}
			need[i] = n
		}
		keys[i], args[i] = s.record(c.Keys, c.Args)
		pending = append(pending, i)
	}
	ctx, cancel := context.WithTimeout(ctx, CallDeadline)
	defer cancel()
	sent := make([]bool, len(calls))
	withBody := false // after a NOSCRIPT: EVAL, which also puts the script back in the cache
	cmds := make([]*redis.Cmd, len(calls))
	for attempt := 0; len(pending) > 0; attempt++ {
		actx, acancel := context.WithTimeout(ctx, AttemptTimeout)
		pipe := rdb.Pipeline()
		for _, i := range pending {
			if withBody {
				cmds[i] = s.rs.Eval(actx, pipe, keys[i], args[i]...)
			} else {
				cmds[i] = s.rs.EvalSha(actx, pipe, keys[i], args[i]...)
			}
		}
		_, _ = pipe.Exec(actx) // every command holds its own reply or error
		acancel()
		again, wait := pending[:0], false
		for _, i := range pending {
			err := cmds[i].Err()
			switch {
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				withBody = true // nothing ran: send it again at once
				again = append(again, i)
			case redis.HasErrorPrefix(err, errLate):
				out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrOutcomeUnknown, err))
			case err == nil || !resendable(err):
				out[i] = cmds[i]
			default:
				sent[i] = sent[i] || mayHaveRun(err)
				switch {
				case !sent[i]:
					out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
				case ctx.Err() != nil:
					out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrOutcomeUnknown, err))
				default:
					resends.Add(1)
					again, wait = append(again, i), true
				}
			}
		}
		pending = again
		if wait {
			select {
			case <-time.After(backoff(attempt)):
			case <-ctx.Done(): // the next attempt fails at once and answers the outcome unknown
			}
		}
	}
	if rep != nil {
		s.confirmEach(ctx, rdb, rep.Timeout(), need, keys, args, out)
	}
	return out
}

// confirmEach waits until the required replicas hold RunEach's successful runs: per primary it
// re-sends the last (its record answers and is touched) with a WAIT behind it. Runs of a
// primary not confirmed answer ErrNotReplicated (or a transport error).
func (s *Script) confirmEach(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration, need []int, keys [][]string, args [][]any, out []*redis.Cmd) {
	last := map[pipeliner]int{}
	byNode := map[pipeliner][]int{}
	most := map[pipeliner]int{}
	for i, cmd := range out {
		if cmd == nil || cmd.Err() != nil || need[i] < 1 {
			continue
		}
		node, err := primaryFor(ctx, rdb, keys[i][0])
		if err != nil {
			out[i] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w (%v)", s.name, ErrNotReplicated, err))
			continue
		}
		last[node] = i
		byNode[node] = append(byNode[node], i)
		most[node] = max(most[node], need[i])
	}
	for node, i := range last {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		err := s.runAcked(actx, rdb, most[node], timeout, keys[i], args[i], nil).Err()
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrNotReplicated) {
			err = fmt.Errorf("%w (%v)", ErrNotReplicated, err)
		}
		for _, j := range byNode[node] {
			out[j] = redis.NewCmdResult(nil, fmt.Errorf("lua: %s: %w", s.name, err))
		}
	}
}

// EvalSha sends the script once by its hash, with a fresh call id: for pipelines (load the
// scripts first), where a NOSCRIPT cannot fall back and the caller handles failures.
func (s *Script) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	keys, args = s.record(keys, args)
	return s.rs.EvalSha(ctx, c, keys, args...)
}

// Eval sends the script once with its body (what Run falls back to after NOSCRIPT).
func (s *Script) Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	keys, args = s.record(keys, args)
	return s.rs.Eval(ctx, c, keys, args...)
}

// firstOnly returns ride for the first send of a call, nil for a re-send.
func firstOnly(attempt int, ride func(context.Context, redis.Pipeliner)) func(context.Context, redis.Pipeliner) {
	if attempt > 0 {
		return nil
	}
	return ride
}

// sendRiding sends the script by its hash with ride's commands behind it in one pipeline,
// and once more with its body after a NOSCRIPT (nothing ran; the riders are blind anyway).
func (s *Script) sendRiding(ctx context.Context, rdb redis.Scripter, keys []string, args []any, ride func(context.Context, redis.Pipeliner)) *redis.Cmd {
	p, ok := rdb.(pipeliner)
	if !ok {
		return redis.NewCmdResult(nil, fmt.Errorf("%w: riders need a client that pipelines", errNotSent))
	}
	pipe := p.Pipeline()
	cmd := s.rs.EvalSha(ctx, pipe, keys, args...)
	ride(ctx, pipe)
	_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		pipe = p.Pipeline()
		cmd = s.rs.Eval(ctx, pipe, keys, args...)
		ride(ctx, pipe)
		_, _ = pipe.Exec(ctx)
	}
	return cmd
}

// record is withCallRecord for a script that keeps records; one without (NewIdempotent) gets
// its keys and arguments as they are.
func (s *Script) record(keys []string, args []any) ([]string, []any) {
	if s.bare {
		return keys, args
	}
	return withCallRecord(keys, args)
}

// withCallRecord appends a fresh call's record key and deadline (once.lua) without touching
// the caller's slices. Every send of the call carries the same deadline.
func withCallRecord(keys []string, args []any) ([]string, []any) {
	keys = append(keys[:len(keys):len(keys)], callKey(keys[0], nextCallID()))
	args = append(args[:len(args):len(args)], time.Now().Add(CallDeadline+ClockSkew).UnixMilli())
	return keys, args
}

// resendable reports whether err says the call did not certainly run to a reply we have: a
// transport error, or a server reply meaning the call was not executed (busy with another
// script, loading its data, a cluster in transition). Any other server reply is the answer.
func resendable(err error) bool {
	if errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return true
}

// mayHaveRun reports whether a failed send might have reached Redis. Only a failure to get a
// connection at all (dial refused, pool exhausted) proves it did not; server replies that
// refuse a call (BUSY, LOADING, ...) also prove it.
func mayHaveRun(err error) bool {
	var re redis.Error
	if errors.As(err, &re) || errors.Is(err, errNotSent) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	return true
}

var resends atomic.Uint64

// Resends counts sends of a call that may have reached Redis and got no reply (a timeout, a
// dropped connection), each followed by a re-send or an unknown outcome: the metric of a
// stalling or flapping Redis.
func Resends() uint64 { return resends.Load() }

func backoff(attempt int) time.Duration {
	d := 20 * time.Millisecond << min(attempt, 4) // 20 ms .. 320 ms
	return d
}

// callKey is the call record's key: the first key's hash tag, so it lives in the script's slot.
func callKey(first, id string) string {
	if open := strings.IndexByte(first, '{'); open >= 0 {
		if end := strings.IndexByte(first[open+1:], '}'); end > 0 {
			return first[:open+end+2] + ":call:" + id
		}
	}
	return first + ":call:" + id
}

// Call ids: a random prefix per process and a counter, so ids never repeat across api
// instances or restarts and minting one costs an atomic add.
var (
	callPrefix = func() string {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("lua: no randomness for call ids: %v", err))
		}
		return hex.EncodeToString(b[:]) + "."
	}()
	callSeq atomic.Uint64
)

func nextCallID() string { return callPrefix + strconv.FormatUint(callSeq.Add(1), 36) }
