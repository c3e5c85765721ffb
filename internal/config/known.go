package config

import (
	"fmt"
	"sort"
	"strings"
)

// otherVariables are the variables read outside Parse: the payment simulator's own, the
// benchmark's, the fault tests' crash point and the test helpers'. Together with Parse's they
// are every variable any flashsale binary or test reads (known_test.go checks the sources).
var otherVariables = []string{
	"FLASHSALE_PAYMENT_SIM_API_KEYS", "FLASHSALE_PAYMENT_SIM_CHAOS_DELAY", "FLASHSALE_PAYMENT_SIM_CHAOS_DUPLICATES",
	"FLASHSALE_PAYMENT_SIM_CHAOS_FAIL_RATE", "FLASHSALE_PAYMENT_SIM_CHAOS_REORDER",
	"FLASHSALE_BENCH_ADDR", "FLASHSALE_BENCH_ALT_LUA", "FLASHSALE_BENCH_BASE_API", "FLASHSALE_BENCH_BATCH", "FLASHSALE_BENCH_EVENTS",
	"FLASHSALE_BENCH_KEEP", "FLASHSALE_BENCH_ORDERS", "FLASHSALE_BENCH_PREFIX", "FLASHSALE_BENCH_REPLIES",
	"FLASHSALE_BENCH_REPORT_ORDERS", "FLASHSALE_BENCH_SERVE", "FLASHSALE_EXPIRE_N",
	"FLASHSALE_CRASH_POINT", "FLASHSALE_TEST_POSTGRES", "FLASHSALE_TEST_REDIS",
}

// Known returns every variable a flashsale binary reads, sorted.
func Known() []string {
	p := &parser{getenv: func(string) string { return "" }, defaults: map[string]string{}}
	_, _ = parse(p)
	set := map[string]bool{}
	for name := range p.defaults {
		set[name] = true
	}
	for _, name := range otherVariables {
		set[name] = true
	}
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// UnknownVariables returns a warning for each FLASHSALE_* variable of environ ("NAME=value"
// entries, as os.Environ gives them) that no binary reads: a misspelling silently leaves the
// default in place, so each warning names the nearest known variable within 3 edits.
func UnknownVariables(environ []string) []string {
	known := Known()
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FLASHSALE_") || isKnown[name] {
			continue
		}
		best, dist := "", 4
		for _, k := range known {
			if d := editDistance(name, k, dist); d < dist {
				best, dist = k, d
			}
		}
		if best != "" {
			out = append(out, fmt.Sprintf("%s is not a flashsale variable and is ignored; did you mean %s?", name, best))
		} else {
			out = append(out, fmt.Sprintf("%s is not a flashsale variable and is ignored", name))
		}
	}
	sort.Strings(out)
	return out
}

// editDistance is the Levenshtein distance of a and b, or limit when it is at least limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}
