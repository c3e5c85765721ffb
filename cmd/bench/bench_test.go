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
	for _, name := range rowNames {
		if !strings.Contains(out.String(), "| "+name) {
			t.Errorf("row %q missing from the table", name)
		}
	}
}
