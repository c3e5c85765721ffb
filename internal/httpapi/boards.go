package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/singleflight"

	"github.com/flashsale/flashsale/internal/ranking"
)

// boardReplies keeps each leaderboard reply (board, category, limit) encoded for one snapshot
// interval, so Redis sees one read per board per interval per instance, not one per polling
// shopper; a rating on this instance drops the cache so its author sees it at once. Bounded:
// only the catalogue's categories are cached, and a full cache keeps what it holds (store).
type boardReplies struct {
	mu    sync.Mutex
	m     map[string]encodedBoard
	loads singleflight.Group
}

type encodedBoard struct {
	at   time.Time
	body []byte
}

const maxCachedBoards = 1024

func (r *boardReplies) lookup(key string, ttl time.Duration) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	return e.body, ok && time.Since(e.at) < ttl
}

// store keeps a board's reply. A full cache first drops the replies that are out of date
// (every one is after an interval); if none is, the new reply is not kept: a key nobody asks
// for again never pushes out the boards shoppers are reading.
func (r *boardReplies) store(key string, at time.Time, body []byte, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]encodedBoard)
	}
	if _, ok := r.m[key]; !ok && len(r.m) >= maxCachedBoards {
		for k, e := range r.m {
			if time.Since(e.at) >= ttl {
				delete(r.m, k)
			}
		}
		if len(r.m) >= maxCachedBoards {
			return
		}
	}
	r.m[key] = encodedBoard{at: at, body: body}
}

// forget drops every cached board (after a write through this instance).
func (r *boardReplies) forget() {
	r.mu.Lock()
	r.m = nil
	r.mu.Unlock()
}

func boardKey(name, category string, limit int) string {
	return name + "\x00" + category + "\x00" + strconv.Itoa(limit)
}

// cachedBoard answers a leaderboard read from the cache, loading it through read when stale.
func (s *Server) cachedBoard(c *gin.Context, name, category string, limit int,
	read func(ctx context.Context) ([]ranking.Entry, error)) {
	ttl := s.Options.SnapshotInterval
	// Only boards of categories the catalogue has are cached: the query is anyone's to choose.
	// Another category is read through (it may be one the snapshot does not show yet).
	keep := true
	if category != "" {
		if e, err := s.catalogue.get(c.Request.Context(), s.Inventory); err == nil {
			_, keep = e.categories[category]
		}
	}
	key := boardKey(name, category, limit)
	if body, ok := s.boards.lookup(key, ttl); ok {
		writeJSON(c, http.StatusOK, body)
		return
	}
	v, err, _ := s.boards.loads.Do(key, func() (any, error) {
		// Shared by every waiting reader: not bound to the first one's connection.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 3*time.Second)
		defer cancel()
		at := time.Now() // before the read: the entry's age counts from what Redis was asked
		entries, err := read(ctx)
		if err != nil {
			return nil, err
		}
		body, err := s.boardBody(ctx, name, entries)
		if err != nil {
			return nil, err
		}
		if keep {
			s.boards.store(key, at, body, ttl)
		}
		return body, nil
	})
	if err != nil {
		fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, v.([]byte))
}

// boardBody encodes a board, naming the items from the in-process catalogue.
func (s *Server) boardBody(ctx context.Context, name string, entries []ranking.Entry) ([]byte, error) {
	for i := range entries {
		if it, err := s.Inventory.Lookup(ctx, entries[i].ItemID); err == nil {
			entries[i].Name = it.Name
		}
	}
	return json.Marshal(gin.H{"board": name, "entries": entries})
}
