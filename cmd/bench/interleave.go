package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// interleaveRounds is how many turns the api and its baselines take in a full run (the default
// of -rounds). The machine is shared, so a baseline measured a minute apart may meet another
// machine; in turns, a change in its load falls on both sides alike and the ratio holds.
const interleaveRounds = 4

// measure runs the api's load and each baseline's load in turns (the order rotating every
// round), each for opt.dur in all after a warm-up per turn (the row's full warm-up on its
// first turn, a short one on the later turns), and returns the merged
// results. With -profile it takes one CPU profile of the api across all its turns.
func (b *bench) measure(ctx context.Context, prof string, api load, bases ...load) (result, []result, error) {
	res, got, _, err := b.measureTurns(ctx, prof, api, bases...)
	return res, got, err
}

// measureTurns is measure that also returns every load's turns (turns[0] the api's, then the
// baselines' in order), for rows whose goal holds turn by turn.
func (b *bench) measureTurns(ctx context.Context, prof string, api load, bases ...load) (result, []result, [][]result, error) {
	rounds := max(1, b.opt.rounds)
	turnWarm := min(b.opt.warmup(), 300*time.Millisecond)
	if b.opt.short {
		rounds = 1
	}
	loads := append([]load{api}, bases...)
	parts := make([][]result, len(loads))
	var done chan struct{}
	if b.opt.profileDir != "" {
		total := time.Duration(rounds*len(loads))*(b.opt.dur/time.Duration(rounds)+turnWarm) +
			time.Duration(len(loads))*(b.opt.warmup()-turnWarm)
		adm := b.apiAdm
		if api.adm != "" {
			adm = api.adm
		}
		done = b.profile(prof, adm, total)
	}
	for r := range rounds {
		for j := range loads {
			k := (j + r) % len(loads)
			l := loads[k]
			l.warmup, l.dur = turnWarm, b.opt.dur/time.Duration(rounds)
			if r == 0 {
				// The first turn has the row's full warm-up (every shopper's token verified
				// once, pools and caches filled), until every request was answered once;
				// later turns only reconnect.
				l.warmup, l.warmAll = b.opt.warmup(), true
			}
			res, err := l.run(ctx)
			if err != nil {
				return result{}, nil, nil, err
			}
			parts[k] = append(parts[k], res)
		}
	}
	if done != nil {
		<-done
	}
	merged := make([]result, len(loads))
	for k := range loads {
		merged[k] = merge(parts[k])
	}
	if len(bases) > 0 && rounds > 1 {
		progress(b.out, "%s: rate over the first baseline's, turn by turn: %s", prof, turnRatios(parts[0], parts[1]))
	}
	return merged[0], merged[1:], parts, nil
}

// profile fetches a CPU profile of the api covering about d from now into the profile
// directory as name.pprof; the channel closes when it is written.
func (b *bench) profile(name, adm string, d time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		secs := max(1, int(d.Seconds()))
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", adm, secs))
		if err != nil {
			progress(b.out, "profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		_ = os.MkdirAll(b.opt.profileDir, 0o755)
		f, err := os.Create(filepath.Join(b.opt.profileDir, name+".pprof"))
		if err != nil {
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}()
	return done
}

// turnRatios lists each round's rate ratio of a over b: how much of a row's ratio is the
// machine's moment.
func turnRatios(a, b []result) string {
	var s []string
	for i := range min(len(a), len(b)) {
		if r := b[i].rate(); r > 0 {
			s = append(s, fmt.Sprintf("%.2f", a[i].rate()/r))
		}
	}
	return strings.Join(s, " ")
}

// merge adds up the turns of one load: counts and measured time add, latencies pool.
func merge(parts []result) result {
	var m result
	m.statuses = map[int]int64{}
	for _, p := range parts {
		m.n += p.n
		m.elapsed += p.elapsed
		m.cpu += p.cpu
		m.redis = m.redis.plus(p.redis)
		m.lat = append(m.lat, p.lat...)
		for k, v := range p.statuses {
			m.statuses[k] += v
		}
	}
	if len(m.lat) > 0 {
		slices.Sort(m.lat)
		m.p50, m.p99 = m.lat[len(m.lat)*50/100], m.lat[min(len(m.lat)-1, len(m.lat)*99/100)]
	}
	return m
}
