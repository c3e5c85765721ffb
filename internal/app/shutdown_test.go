package app_test

import (
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testenv"
)

// Run leaves nothing running: once it returned and Close released the connections, the
// goroutines are back to what they were before New.
func TestRunLeavesNoGoroutines(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	before := runtime.NumGoroutine()
	r := runAPI(t, keys.Prefix, broker.Addr(), nil)
	r.putItem("drop", 10)
	s := r.openStream()
	s.waitItems(t, "drop", 10)
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	<-s.done
	r.api.Close()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Run and Close, %d before New:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
