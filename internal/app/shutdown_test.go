package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// held is a test route standing for a purchase whose script ran but whose answer is not sent
// yet: it buys for real, says so on ran, and answers 201 once release closes (or gives up
// when its connection is cut).
type held struct {
	ran     chan string // the order id
	release chan struct{}
}

func addHeldPurchase(api *app.API) *held {
	h := &held{ran: make(chan string, 1), release: make(chan struct{})}
	api.Server().Engine().POST("/test/held-purchase", func(c *gin.Context) {
		res, err := api.Inventory.Purchase(c.Request.Context(), inventory.PurchaseRequest{ItemID: "drop", UserID: "held", Quantity: 1})
		if err != nil {
			c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		h.ran <- res.Order.ID
		select {
		case <-h.release:
			c.JSON(http.StatusCreated, gin.H{"id": res.Order.ID})
		case <-c.Request.Context().Done():
		}
	})
	return h
}

// answer is one client call's outcome.
type answer struct {
	status int
	body   string
	err    error
}

// send calls the held purchase on a client of its own, in the background.
func (h *held) send(t *testing.T, base string) <-chan answer {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	out := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Post(base+"/test/held-purchase", "application/json", nil)
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- answer{status: resp.StatusCode, body: string(b), err: err}
	}()
	return out
}

// captureLog sends the default logger's records to a buffer until the test ends.
func captureLog(t *testing.T) func() string {
	var mu sync.Mutex
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// SIGTERM with FLASHSALE_SHUTDOWN_DRAIN: /readyz answers 503 at once while the listener still
// serves (a purchase made then gets its 201, on a connection closed after it), then the
// listener closes and a purchase in flight all along still gets its 201, not a reset; Run
// returns nil and logs what it drained.
func TestShutdownDrainsThenAnswersInFlight(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	logs := captureLog(t)
	var h *held
	draining, endDrain := make(chan struct{}), make(chan struct{})
	r := runAPIWith(t, keys.Prefix, broker.Addr(), map[string]string{
		"FLASHSALE_SHUTDOWN_DRAIN": "30s", "FLASHSALE_SHUTDOWN_TIMEOUT": "60s",
	}, func(api *app.API) {
		h = addHeldPurchase(api)
		app.SetDrainWait(api, func(ctx context.Context, d time.Duration) {
			close(draining)
			select {
			case <-endDrain:
			case <-ctx.Done():
			}
		})
	})
	// A failing test must not leave Run waiting out the drain and the held purchase.
	endDrainOnce, releaseOnce := sync.OnceFunc(func() { close(endDrain) }), sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(func() { endDrainOnce(); releaseOnce() })
	r.putItem("drop", 10)
	var login struct {
		Token string `json:"token"`
	}
	if st := r.call("POST", "/api/login", "", map[string]any{"user": "late"}, &login); st != http.StatusOK {
		t.Fatalf("login: %d", st)
	}
	inFlight := h.send(t, r.base)
	var orderID string
	select {
	case orderID = <-h.ran:
	case a := <-inFlight:
		t.Fatalf("the held purchase answered early: %+v", a)
	case <-time.After(30 * time.Second):
		t.Fatal("the held purchase never ran")
	}

	r.signal()
	select {
	case <-draining:
	case <-time.After(30 * time.Second):
		t.Fatal("no drain after the shutdown began")
	}
	if st := r.call("GET", "/readyz", "", nil, nil); st != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining: %d, want 503", st)
	}
	req, _ := http.NewRequest("POST", r.base+"/api/items/drop/purchase", strings.NewReader(`{"quantity":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+login.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a purchase while draining: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !resp.Close {
		t.Fatalf("a purchase while draining: %d, connection close %v; want 201 on a connection closed after it", resp.StatusCode, resp.Close)
	}

	endDrainOnce()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.base, "http://"))
		if err != nil {
			break // the listener is closed: the held purchase is in flight through Shutdown
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after the drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	releaseOnce()
	a := <-inFlight
	var body struct {
		ID string `json:"id"`
	}
	if a.err != nil || a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &body) != nil || body.ID != orderID {
		t.Fatalf("the purchase in flight at shutdown: %+v; want 201 with order %s", a, orderID)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs()
	for _, want := range []string{`"msg":"shutting down"`, `"drain":"30s"`, `"msg":"shutdown complete"`, `"requests_cut":false`, `"msg":"outbox relay stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("shutdown logs lack %s:\n%s", want, out)
		}
	}
}

// A request still running at FLASHSALE_SHUTDOWN_TIMEOUT has its connection closed: its client
// learns at once, and its handler does not outlive Run.
func TestShutdownCutsRequestsPastTheTimeout(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	var h *held
	r := runAPIWith(t, keys.Prefix, broker.Addr(), map[string]string{"FLASHSALE_SHUTDOWN_TIMEOUT": "200ms"},
		func(api *app.API) { h = addHeldPurchase(api) })
	r.putItem("drop", 10)
	inFlight := h.send(t, r.base)
	select {
	case <-h.ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the held purchase never ran")
	}
	if err := r.stop(); err != nil { // never released
		t.Fatalf("Run: %v", err)
	}
	select {
	case a := <-inFlight:
		if a.err == nil {
			t.Fatalf("the request past the timeout was answered: %+v", a)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request past the shutdown timeout still holds its connection after Run returned")
	}
}

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
