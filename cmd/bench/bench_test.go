package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve the baselines too: the bench re-executes its own binary
// with FLASHSALE_BENCH_SERVE set.
func TestMain(m *testing.M) {
	if mode := os.Getenv(serveEnv); mode != "" {
		if err := serveBaseline(mode); err != nil {
			os.Stderr.WriteString("bench: " + err.Error() + "\n")
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// TestShortRun runs the whole bench tiny against the real Redis and Postgres and checks that
// every row of the table is produced. It asserts no timing: the numbers are the bench's job.
func TestShortRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, options{short: true}, &out); err != nil {
		t.Fatalf("bench -short: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	lines := strings.Split(out.String(), "\n")
	for _, name := range rowNames {
		var line string
		for _, l := range lines {
			if strings.HasPrefix(l, "| "+name+" |") || (strings.HasPrefix(l, "| "+name+" (") && !isRow(l)) {
				line = l
				break
			}
		}
		if line == "" {
			t.Errorf("row %q missing from the table", name)
			continue
		}
		// A row that printed, but measured nothing ("–" where flashsale's figure belongs),
		// is as broken as a missing one: e.g. a latency row with no probe order arriving.
		if cells := strings.Split(line, "|"); len(cells) < 3 || strings.TrimSpace(cells[2]) == "–" {
			t.Errorf("row %q has no measurement: %s", name, line)
		}
	}
}

// isRow reports whether l starts with one of the exact row names (so a row whose name extends
// another's, like "sold-out answers/s (hello fed the same POST bytes)", is not taken for it).
func isRow(l string) bool {
	for _, name := range rowNames {
		if strings.HasPrefix(l, "| "+name+" |") {
			return true
		}
	}
	return false
}
