package httpapi

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
)

// The hub frames each distinct catalogue once and hands every subscriber the same bytes; a
// subscriber that stops taking them is dropped once its bounded queue is full (its stream
// ends), while the others keep receiving; Close ends the rest.
func TestStreamHubFanOutAndDropsSlowSubscribers(t *testing.T) {
	h := newStreamHub(StreamOptions{MinGap: time.Millisecond, Check: time.Millisecond, Heartbeat: time.Hour, Queue: 2,
		PerClient: config.Defaults().StreamPerClient, Max: config.Defaults().StreamMax})
	var version atomic.Int64
	var mu sync.Mutex
	frames := map[*frame]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seq atomic.Uint64
	go h.run(ctx, func(context.Context) ([]byte, uint64, error) {
		return []byte(`{"items":[{"v":` + string(rune('0'+version.Load()%10)) + `}]}`), seq.Add(1), nil
	})

	slow, _ := h.subscribe()
	fast := make([]*subscriber, 20)
	for i := range fast {
		fast[i], _ = h.subscribe()
	}
	for v := int64(1); v <= 6; v++ {
		version.Store(v)
		for _, sub := range fast { // each fast subscriber takes the event; all get the same frame
			select {
			case f := <-sub.queue:
				mu.Lock()
				frames[f] = true
				mu.Unlock()
			case <-sub.gone:
				t.Fatal("a subscriber that keeps up was dropped")
			case <-time.After(10 * time.Second):
				t.Fatal("no event after a change")
			}
		}
	}
	select {
	case <-slow.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("a subscriber that never reads was not dropped")
	}
	if _, dropped := h.counts(); dropped < 1 {
		t.Fatalf("dropped = %d", dropped)
	}
	if len(frames) > 7 { // one frame per distinct catalogue (the first may be the 0th version)
		t.Fatalf("%d distinct frames for 6 changes: encoded per subscriber?", len(frames))
	}
	h.Close()
	for _, sub := range fast {
		select {
		case <-sub.gone:
		default:
			t.Fatal("Close left a stream open")
		}
	}
	if _, ok := h.subscribe(); ok {
		t.Fatal("subscribe after Close")
	}
}

// With no stream open the hub asks for no catalogue (at 10,000 items every change would be
// encoded for nobody); once one subscribes, it watches again and sends the next change.
func TestStreamHubIdleWithoutSubscribers(t *testing.T) {
	h := newStreamHub(StreamOptions{MinGap: time.Millisecond, Check: time.Millisecond, Heartbeat: time.Hour, Queue: 4,
		PerClient: config.Defaults().StreamPerClient, Max: config.Defaults().StreamMax})
	var asked, version atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.run(ctx, func(context.Context) ([]byte, uint64, error) {
		return []byte(`{"items":[{"v":` + string(rune('0'+version.Load()%10)) + `}]}`), uint64(asked.Add(1)), nil
	})
	// A window, not a wait for an outcome: a hub that watches anyway asks ~200 times in it.
	time.Sleep(200 * time.Millisecond)
	if n := asked.Load(); n != 0 {
		t.Fatalf("the hub asked for the catalogue %d times with no stream open", n)
	}
	// The catalogue changes before anyone subscribes: the hub, idle until then, must send it as
	// it is when the subscriber joins (set after subscribe, the hub could read it first).
	version.Store(1)
	sub, _ := h.subscribe()
	select {
	case f := <-sub.queue:
		if string(f.b) != "event: items\ndata: {\"items\":[{\"v\":1}]}\n\n" {
			t.Fatalf("first event %q", f.b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after a subscriber joined")
	}
	if asked.Load() == 0 {
		t.Fatal("the hub did not ask for the catalogue with a stream open")
	}
}

// subscribe registers a stream without a first event (the hub's own tests); ok is false after
// Close.
func (h *streamHub) subscribe() (sub *subscriber, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	return h.addLocked(), true
}
