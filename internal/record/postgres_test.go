package record_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// gorm's log lines (a failed statement here) arrive in the process's JSON log as structured
// lines with component "gorm", not as plain text beside it; statements are logged without
// their parameters (ParameterizedQueries).
func TestGormLogsIntoSlog(t *testing.T) {
	var buf lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	db, err := record.Open(testenv.Postgres(t))
	slog.SetDefault(prev) // Open took its logger; the rest of the package logs as before
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	const secret = "param-value-not-logged"
	if err := db.WithContext(context.Background()).Exec("SELECT * FROM no_such_table WHERE x = ?", secret).Error; err == nil {
		t.Fatal("a query of a missing table succeeded")
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	var gormLines int
	for _, line := range bytes.Split(bytes.TrimSpace(buf.b.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if m["component"] == "gorm" {
			gormLines++
			if bytes.Contains(line, []byte(secret)) {
				t.Errorf("gorm logged a statement's parameter: %s", line)
			}
		}
	}
	if gormLines == 0 {
		t.Fatalf("the failed statement left no gorm line in the JSON log: %q", buf.b.String())
	}
}
