package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// row is one line of the table: flashsale's measure beside its baseline.
type row struct {
	name      string
	res       *result // flashsale
	base      *result // the baseline (nil: none)
	baseName  string
	target    float64       // wanted res/base rate ratio (0: none)
	wantP99   time.Duration // wanted p99 (0: none)
	want      int           // the status every reply should have (0: any)
	noLatency bool
	noRate    bool
	note      string
	// Rows that are not a rate beside a baseline's give their cells as text.
	text, baseText, ratioText, targetText string
}

// rowNames lists every row the bench prints, in order (the -short test checks them).
var rowNames = []string{
	"purchase attempts/s",
	minimalRowName,
	apiCPURowName,
	redisCPURowName,
	redisMemRowName,
	retentionRowName,
	replicaRowName,
	replicaCPURowName,
	replicaWaitRowName,
	"GET /api/items reads/s",
	itemsSameRowName,
	"GET /api/items/{id} reads/s",
	"GET /api/leaderboards/best-sellers reads/s",
	"sold-out answers/s",
	soldOutSameRowName,
	"waiting-room poll answers/s (20,000 waiting)",
	"waiting-room poll answers/s (hello fed the same GET bytes)",
	"waiting-room joins/s",
	"reconciler rows/s",
	"purchase → Postgres latency",
	"idle Redis commands/s per api instance",
	"Redis commands per GET /api/orders",
	"GET /api/items reads/s, large catalogue",
	relayRowName,
	streamRowName,
	streamRSSName,
	streamCPUName,
}

func (b *bench) ordersMade() int64 {
	rdb := b.rdb
	n, _ := rdb.HLen(context.Background(), keyspace.Space{Prefix: b.prefix + "a:"}.Item(benchItem).Orders()).Result()
	return n
}

func (r result) cell(noLatency, noRate bool) string {
	var parts []string
	if !noRate {
		parts = append(parts, fmt.Sprintf("%s/s", thousands(r.rate())))
	}
	if !noLatency && r.p50 > 0 {
		parts = append(parts, fmt.Sprintf("%s / %s", ms(r.p50), ms(r.p99)))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// print writes the table as Markdown (docs/performance.md quotes it as is).
func (b *bench) print() {
	w := b.out
	fmt.Fprintln(w, "| measure | flashsale (rate, p50 / p99) | baseline | ratio | target | server CPU per request: flashsale / baseline |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	var notes []string
	rows := slices.Clone(b.rows)
	slices.SortStableFunc(rows, func(x, y row) int { return rowOrder(x.name) - rowOrder(y.name) })
	for _, r := range rows {
		ours, base, ratio, target := "–", "–", "–", "–"
		if r.res != nil {
			ours = r.res.cell(r.noLatency, r.noRate)
		}
		if r.text != "" {
			ours = r.text
		}
		if r.base != nil {
			base = r.baseName + ": " + r.base.cell(r.noLatency, false)
			if r.res != nil && r.base.rate() > 0 {
				x := r.res.rate() / r.base.rate()
				ratio = fmt.Sprintf("**%.2f×**", x)
				if r.target > 0 {
					target = fmt.Sprintf("≥ %.1f× %s", r.target, mark(x >= r.target))
				}
			}
		}
		if r.wantP99 > 0 && r.res != nil {
			target = fmt.Sprintf("p99 < %s %s", r.wantP99, mark(r.res.p99 < r.wantP99))
		}
		for _, t := range []struct {
			cell *string
			text string
		}{
			{&ours, r.text}, {&base, r.baseText}, {&ratio, r.ratioText}, {&target, r.targetText},
		} {
			if t.text != "" {
				*t.cell = t.text
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.name, ours, base, ratio, target, cpuCell(r))
		if r.note != "" {
			notes = append(notes, r.name+": "+r.note)
		}
		if r.want != 0 && r.res != nil {
			if other := otherStatuses(r.res.statuses, r.want); other != "" {
				notes = append(notes, fmt.Sprintf("%s: replies other than %d: %s", r.name, r.want, other))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

// cpuCell compares the servers' CPU time per request (from /proc), which shows how much work
// each answer costs even when a busy machine moves the rates.
func cpuCell(r row) string {
	if r.res == nil || r.base == nil || r.res.cpuPerOp() == 0 || r.base.cpuPerOp() == 0 {
		return "–"
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }
	return fmt.Sprintf("%s / %s (%.2f×)", us(r.res.cpuPerOp()), us(r.base.cpuPerOp()),
		float64(r.res.cpuPerOp())/float64(r.base.cpuPerOp()))
}

// rowOrder is the place of a row in rowNames (steps run in another order: the purchase row
// is measured after the reads, beside the still running EVALSHA server).
func rowOrder(name string) int {
	for i, n := range rowNames {
		if name == n {
			return i
		}
	}
	for i, n := range rowNames {
		if strings.HasPrefix(name, n+" (") {
			return i
		}
	}
	return len(rowNames)
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func otherStatuses(st map[int]int64, want int) string {
	var total int64
	var keys []int
	for k, v := range st {
		total += v
		if k != want {
			keys = append(keys, k)
		}
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d ×%d (%.1f%%)", k, st[k], 100*float64(st[k])/float64(total)))
	}
	return strings.Join(parts, ", ")
}
