package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestScriptReplies is the table of limit.lua's replies: bad ARGV is an error that writes
// nothing; a fresh key allows a burst; a refusal writes nothing.
func TestScriptReplies(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	key := keys.RateLimit("t", "bad")
	bad := [][]any{
		{0, 1000, 1, 1},       // rate 0
		{-1, 1000, 1, 1},      // negative rate
		{"x", 1000, 1, 1},     // not a number
		{1, 0, 1, 1},          // period 0
		{1, 1000, 0, 1},       // burst 0
		{1, 1000, 1.5, 1},     // fractional burst
		{1, 1000, 2, 0},       // cost 0 would be a free write
		{1, 1000, 2, 3},       // cost over burst can never pass
		{1, 1000, 2, "1e999"}, // inf
		{"inf", 1000, 2, 1},   // an infinite rate would allow everything
		{"nan", 1000, 2, 1},
		{1, "inf", 2, 1},
		{1, 1000, "inf", 1},
	}
	for _, args := range bad {
		if err := script.Run(ctx, rdb, []string{key}, args...).Err(); err == nil || !isLimitErr(err) {
			t.Errorf("ARGV %v: want an ERR limit reply, got %v", args, err)
		}
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("bad ARGV wrote the key")
	}

	// rate 1 per minute, burst 3: three pass at once, each leaving one fewer.
	key = keys.RateLimit("t", "fresh")
	run := func() []string {
		t.Helper()
		r, err := script.Run(ctx, rdb, []string{key}, 1, 60000, 3, 1).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := 2; i >= 0; i-- {
		r := run()
		if r[0] != "1" || r[1] != strconv.Itoa(i) || r[2] != "0.000" {
			t.Fatalf("allowed call: got %q, want remaining %d", r, i)
		}
		reset, _ := strconv.ParseFloat(r[3], 64)
		if want := float64(3-i) * 60000; math.Abs(reset-want) > 50 {
			t.Fatalf("reset %v ms, want about %v", reset, want)
		}
	}
	before := rdb.Get(ctx, key).Val()
	ttl := rdb.PTTL(ctx, key).Val()
	r := run()
	retry, _ := strconv.ParseFloat(r[2], 64)
	if r[0] != "0" || r[1] != "0" || retry < 59000 || retry > 60000 {
		t.Fatalf("refusal: got %q", r)
	}
	if after := rdb.Get(ctx, key).Val(); after != before {
		t.Fatalf("refusal wrote the key: %s -> %s", before, after)
	}
	if ttl <= 0 || ttl > 3*time.Minute+time.Second {
		t.Fatalf("key TTL %v: must cover the time to refill fully and no more", ttl)
	}
}

func isLimitErr(err error) bool {
	return err != nil && len(err.Error()) > 9 && err.Error()[:9] == "ERR limit"
}

// timedCall is one decision with the Redis server time it was taken at: TIME and the script
// run inside one MULTI, so nothing runs between them.
type timedCall struct {
	at      time.Duration // server time since the epoch
	allowed bool
}

func decideTimed(ctx context.Context, rdb redis.UniversalClient, key string, p Policy) (timedCall, error) {
	pipe := rdb.TxPipeline()
	tm := pipe.Time(ctx)
	res := script.EvalSha(ctx, pipe, []string{key}, p.Rate, p.Period.Milliseconds(), p.Burst, 1)
	if _, err := pipe.Exec(ctx); err != nil {
		return timedCall{}, err
	}
	r, err := res.StringSlice()
	if err != nil {
		return timedCall{}, err
	}
	d, err := decode(p, r)
	return timedCall{at: time.Duration(tm.Val().UnixNano()), allowed: d.Allowed}, err
}

// TestAccuracy drives one key from many goroutines for a few periods: over the span E from the
// first to the last decision, the allowed count is within 1 of burst + rate*E/period, never
// above. The lower bound needs no pause longer than (burst-1) emission intervals (GCRA banks no
// time beyond the burst), so each case keeps 50ms of slack; the largest pause is logged.
func TestAccuracy(t *testing.T) {
	cases := []struct {
		rate, burst int
		period      time.Duration
		periods     int
	}{
		{rate: 4, burst: 4, period: 100 * time.Millisecond, periods: 10},
		{rate: 10, burst: 5, period: 200 * time.Millisecond, periods: 6},
		{rate: 3, burst: 10, period: 300 * time.Millisecond, periods: 5},
		{rate: 50, burst: 20, period: time.Second, periods: 3},
		{rate: 7, burst: 7, period: 700 * time.Millisecond, periods: 3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d per %s burst %d", tc.rate, tc.period, tc.burst), func(t *testing.T) {
			t.Parallel()
			rdb, keys := testenv.Redis(t)
			p := Policy{Rate: tc.rate, Period: tc.period, Burst: tc.burst}
			key := keys.RateLimit("acc", "one")
			ctx := context.Background()
			deadline := time.Now().Add(time.Duration(tc.periods) * tc.period)
			const workers = 16
			var (
				mu    sync.Mutex
				calls []timedCall
				wg    sync.WaitGroup
				fail  atomic.Value
			)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []timedCall
					for time.Now().Before(deadline) {
						c, err := decideTimed(ctx, rdb, key, p)
						if err != nil {
							fail.Store(err)
							return
						}
						mine = append(mine, c)
					}
					mu.Lock()
					calls = append(calls, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			if err, _ := fail.Load().(error); err != nil {
				t.Fatal(err)
			}
			sort.Slice(calls, func(i, j int) bool { return calls[i].at < calls[j].at })
			allowed, pause := 0, time.Duration(0)
			for i, c := range calls {
				if c.allowed {
					allowed++
				}
				if i > 0 {
					pause = max(pause, c.at-calls[i-1].at)
				}
			}
			elapsed := calls[len(calls)-1].at - calls[0].at
			bound := float64(tc.burst) + float64(tc.rate)*elapsed.Seconds()/tc.period.Seconds()
			t.Logf("%d calls, %d allowed over %v (longest pause %v): bound %.2f", len(calls), allowed, elapsed, pause, bound)
			// 0.01 absorbs the millisecond fractions the script rounds TAT to.
			if float64(allowed) > bound+0.01 {
				t.Fatalf("allowed %d > burst + rate*elapsed = %.3f", allowed, bound)
			}
			// No refusal without cause, however the machine paused the callers: GCRA refuses at t
			// only when the cells allowed since some allowed call at s outrun the rate by the
			// burst, i.e. allowed[s, t) > (t-s)/T + burst - 1 (T the emission interval). Every
			// refusal must have such an s; 0.1 absorbs TIME read a few µs before the script's.
			emission := tc.period.Seconds() / float64(tc.rate)
			var granted []time.Duration
			for _, c := range calls {
				if c.allowed {
					granted = append(granted, c.at)
					continue
				}
				justified := false
				for i, s := range granted {
					if float64(len(granted)-i)-(c.at-s).Seconds()/emission > float64(tc.burst)-1-0.1 {
						justified = true
						break
					}
				}
				if !justified {
					t.Fatalf("refused at %v with no cause: %d allowed so far", c.at, len(granted))
				}
			}
		})
	}
}

// TestAllowNeverMoreThanPolicy races the public Allow on one subject and bounds the allowed
// count by the server time around the whole run.
func TestAllowNeverMoreThanPolicy(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	p := Policy{Rate: 20, Period: 200 * time.Millisecond, Burst: 4}
	l, err := NewLimiter(rdb, keys, map[string]Policy{"buy": p})
	if err != nil {
		t.Fatal(err)
	}
	start := rdb.Time(ctx).Val()
	deadline := time.Now().Add(600 * time.Millisecond)
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				d, err := l.Allow(ctx, "buy", "bot")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					refused.Add(1)
					if d.RetryAfter <= 0 || d.Remaining != 0 || d.Limit != p.Burst {
						t.Errorf("refusal %+v", d)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := rdb.Time(ctx).Val().Sub(start)
	bound := float64(p.Burst) + float64(p.Rate)*elapsed.Seconds()/p.Period.Seconds()
	if float64(allowed.Load()) > bound+0.01 || refused.Load() == 0 {
		t.Fatalf("allowed %d, refused %d over %v: bound %.2f", allowed.Load(), refused.Load(), elapsed, bound)
	}
}

// TestRetryAfterHonoured: waiting the refusal's RetryAfter always lets the next call through.
func TestRetryAfterHonoured(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	l, err := NewLimiter(rdb, keys, map[string]Policy{"pay": {Rate: 1, Period: 250 * time.Millisecond, Burst: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"alice", "bob"} {
		for round := 0; round < 3; round++ {
			var d Decision
			for d, err = l.Allow(ctx, "pay", subject); err == nil && d.Allowed; d, err = l.Allow(ctx, "pay", subject) {
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > 250*time.Millisecond {
				t.Fatalf("retry after %v, want within one emission interval", d.RetryAfter)
			}
			time.Sleep(d.RetryAfter.Round(time.Millisecond) + time.Millisecond)
			if d, err = l.Allow(ctx, "pay", subject); err != nil || !d.Allowed {
				t.Fatalf("after waiting RetryAfter: %+v %v", d, err)
			}
		}
	}
}

// TestSeparateKeys: subjects and policies each have their own budget.
func TestSeparateKeys(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	p := Policy{Rate: 1, Period: time.Minute, Burst: 2}
	l, err := NewLimiter(rdb, keys, map[string]Policy{"pay": p, "cancel": p})
	if err != nil {
		t.Fatal(err)
	}
	take := func(policy, subject string) bool {
		d, err := l.Allow(ctx, policy, subject)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	var wg sync.WaitGroup
	for _, subject := range []string{"a", "b", "c", "10.0.0.1", "::1"} {
		for _, policy := range []string{"pay", "cancel"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, second, third := take(policy, subject), take(policy, subject), take(policy, subject)
				if !first || !second || third {
					t.Errorf("%s/%s: want exactly the burst of 2", policy, subject)
				}
			}()
		}
	}
	wg.Wait()
	n := 0
	for _, k := range rdb.Keys(ctx, keys.Prefix+"*").Val() {
		if !strings.Contains(k, ":call:") { // the call records of exactlyonce.Script.Run
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d limiter keys, want one per policy and subject (10)", n)
	}
}

// TestPolicies: off and unknown policies allow without Redis; a reload takes effect at once;
// a bad policy is refused and leaves the old ones in place.
func TestPolicies(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	l, err := NewLimiter(rdb, keys, map[string]Policy{"pay": {Rate: 1, Period: time.Minute, Burst: 1}, "off": {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"off", "unknown"} {
		if d, err := l.Allow(ctx, name, "u"); err != nil || !d.Allowed || d.Limit != 0 {
			t.Fatalf("%s: %+v %v", name, d, err)
		}
	}
	if d, _ := l.Allow(ctx, "pay", "u"); !d.Allowed {
		t.Fatal("first call refused")
	}
	if d, _ := l.Allow(ctx, "pay", "u"); d.Allowed || d.Limit != 1 {
		t.Fatalf("second call: %+v", d)
	}
	// A reload to burst 5 reinterprets the stored state: room for more at once.
	if err := l.SetPolicies(map[string]Policy{"pay": {Rate: 1, Period: time.Minute, Burst: 5}}); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "pay", "u"); !d.Allowed || d.Limit != 5 || d.Remaining != 3 {
		t.Fatalf("after reload: %+v", d)
	}
	for _, bad := range []Policy{{Rate: 1, Period: 0, Burst: 1}, {Rate: 1, Period: time.Second, Burst: 0}, {Rate: -1, Period: time.Second, Burst: 1}} {
		if err := l.SetPolicies(map[string]Policy{"pay": bad}); !errors.Is(err, ErrBadPolicy) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if p, on := l.Policy("pay"); !on || p.Burst != 5 {
		t.Fatalf("a refused reload changed the policy: %+v", p)
	}
	if _, err := l.AllowN(ctx, "pay", "u", 6); !errors.Is(err, ErrBadPolicy) {
		t.Fatalf("cost over burst: %v", err)
	}

	// Reloads race with decisions without tearing a policy.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				if i%2 == 0 {
					_ = l.SetPolicies(map[string]Policy{"pay": {Rate: 1 + j, Period: time.Second, Burst: 1 + j}})
				} else if _, err := l.Allow(ctx, "pay", "racer"); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestFailClosed: with Redis unreachable, Allow reports an error, never an allowance.
func TestFailClosed(t *testing.T) {
	_, keys := testenv.Redis(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	l, err := NewLimiter(dead, keys, map[string]Policy{"pay": {Rate: 1, Period: time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(context.Background(), "pay", "u")
	if err == nil || d.Allowed {
		t.Fatalf("dead Redis: %+v %v, want an error", d, err)
	}
}

// TestTATsAndWholeMilliseconds: with an emission interval that is no whole number of ms (3 per
// second), the stored TAT keeps its fraction exactly (gcra.lua hands Redis the number, no
// string.format), so a burst adds no rounding up; the reply's times are whole ms rounded up,
// never less than the exact wait; a TAT an older version stored as '%.3f' reads the same.
func TestTATsAndWholeMilliseconds(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	p := Policy{Rate: 3, Period: time.Second, Burst: 2}
	key := keys.RateLimit("tat", "frac")
	const emission = 1000.0 / 3
	var first float64 // the server time of the first decision, ms
	for i := range 3 {
		pipe := rdb.TxPipeline()
		tm := pipe.Time(ctx)
		res := script.EvalSha(ctx, pipe, []string{key}, p.Rate, p.Period.Milliseconds(), p.Burst, 1)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		r := res.Val().([]any)
		now := float64(tm.Val().UnixMicro()) / 1000
		if i == 0 {
			first = now
		}
		stored, err := strconv.ParseFloat(rdb.Get(ctx, key).Val(), 64)
		if err != nil {
			t.Fatal(err)
		}
		// The script ran a few µs after TIME: its TAT is first + (i+1) * emission, a little later.
		want := first + float64(min(i+1, 2))*emission
		if stored < want || stored > want+5 {
			t.Fatalf("call %d: stored TAT %.4f, want %.4f (+ the µs between TIME and the script)", i+1, stored, want)
		}
		reset, err1 := strconv.ParseFloat(r[3].(string), 64)
		retry, err2 := strconv.ParseFloat(r[2].(string), 64)
		if err1 != nil || err2 != nil || reset != math.Floor(reset) || retry != math.Floor(retry) {
			t.Fatalf("call %d: reply %q: retry and reset must be whole ms", i+1, r)
		}
		if reset < stored-now-1 || reset > stored-first+1 {
			t.Fatalf("call %d: reset %v ms, the TAT is %.3f ms ahead", i+1, reset, stored-now)
		}
		if i < 2 && r[0] != "1" {
			t.Fatalf("call %d of a burst of 2 refused: %q", i+1, r)
		}
		if i == 2 {
			// Refused: the exact wait is TAT + emission - burst*emission - now, rounded up (now
			// is TIME's, a few µs before the script's: 0.05 ms of slack).
			exact := stored + emission - 2*emission - now
			if r[0] != "0" || retry < exact-0.05 || retry > exact+1 {
				t.Fatalf("refusal %q: retry %v ms, exact wait %.3f ms", r, retry, exact)
			}
		}
	}

	// A TAT as an older version wrote it ('%.3f'), a minute ahead: read, refused, not rewritten.
	legacy := keys.RateLimit("tat", "legacy")
	tm := rdb.Time(ctx).Val()
	old := strconv.FormatFloat(float64(tm.UnixMicro())/1000+60000.5, 'f', 3, 64)
	rdb.Set(ctx, legacy, old, time.Minute)
	r, err := script.Run(ctx, rdb, []string{legacy}, 1, 60000, 1, 1).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	retry, _ := strconv.ParseFloat(r[2], 64)
	// The lower bound allows for the time between TIME and the script on a busy machine.
	if r[0] != "0" || retry < 59000 || retry > 60002 || rdb.Get(ctx, legacy).Val() != old {
		t.Fatalf("legacy TAT %s: reply %q, stored now %s", old, r, rdb.Get(ctx, legacy).Val())
	}
}

// A refusal costs no Redis: until its retry time a refused subject is refused from memory with
// the same figures and no command on the (private) server; after it Redis is asked again. Other
// subjects are not affected, and a policy reload forgets the refusals.
func TestRefusalsCostNoRedis(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	ctx := context.Background()
	l, err := NewLimiter(rdb, keys, map[string]Policy{"cancel": {Rate: 1, Period: 2 * time.Second, Burst: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := l.Allow(ctx, "cancel", "mallory"); err != nil || !d.Allowed {
			t.Fatalf("within the burst: %+v %v", d, err)
		}
	}
	first, err := l.Allow(ctx, "cancel", "mallory")
	if err != nil || first.Allowed || first.RetryAfter <= 0 {
		t.Fatalf("over the burst: %+v %v, want a refusal", first, err)
	}
	// 200 refusals from memory take far less than the 2 s retry time, even on a busy machine.
	before := commands(t, rdb)
	const n = 200
	for i := range n {
		d, err := l.Allow(ctx, "cancel", "mallory")
		if err != nil || d.Allowed || d.Limit != first.Limit || d.RetryAfter <= 0 || d.RetryAfter > first.RetryAfter || d.Reset < d.RetryAfter {
			t.Fatalf("refusal %d from memory: %+v %v (first %+v)", i, d, err, first)
		}
	}
	if used := commands(t, rdb) - before - 1; used != 0 { // less the INFO that measured
		t.Fatalf("%d refused requests cost %d Redis commands, want 0", n, used)
	}
	if l.FromMemory() < int64(n) {
		t.Fatalf("FromMemory %d, want at least %d", l.FromMemory(), n)
	}
	if d, err := l.Allow(ctx, "cancel", "alice"); err != nil || !d.Allowed {
		t.Fatalf("another subject: %+v %v", d, err)
	}
	testenv.WaitFor(t, "mallory allowed again after her retry time", 10*time.Second, func() bool {
		d, err := l.Allow(ctx, "cancel", "mallory")
		return err == nil && d.Allowed
	})
	for {
		if d, _ := l.Allow(ctx, "cancel", "mallory"); !d.Allowed {
			break
		}
	}
	if err := l.SetPolicies(map[string]Policy{"cancel": {Rate: 1000, Period: time.Second, Burst: 1000}}); err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(ctx, "cancel", "mallory"); err != nil || d.Limit != 1000 {
		t.Fatalf("after a reload: %+v %v, want the new policy's decision (refusals forgotten)", d, err)
	}
}

var callsRe = regexp.MustCompile(`calls=(\d+)`)

// commands is how many commands the server has executed in all (INFO commandstats, a script
// call counting as itself and every command it ran).
func commands(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range callsRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
