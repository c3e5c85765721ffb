package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/ranking"
)

// Boards are served from a short-lived cache, but a rating through this instance drops it:
// the rater sees the board move on the next read.
func TestBoardCacheDroppedByRating(t *testing.T) {
	a := newRatingAPI(t, 10)
	a.item("phone1", "Phone One", "phones")
	a.buyer("phone1", "alice")
	for range 2 { // the second read is served from the cache
		code, out := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones", "", "")
		if es := entries(t, out); code != http.StatusOK || len(es) != 0 {
			t.Fatalf("before rating: %d %v", code, out)
		}
	}
	if code, out := a.do(http.MethodPost, "/api/items/phone1/rating", "alice", `{"stars":5}`); code != http.StatusOK {
		t.Fatalf("rating: %d %v", code, out)
	}
	code, out := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones", "", "")
	if es := entries(t, out); code != http.StatusOK || len(es) != 1 || es[0]["item_id"] != "phone1" || es[0]["name"] != "Phone One" {
		t.Fatalf("after rating: %d %v", code, out)
	}
}

// The leaderboard cache is keyed by the query, which anyone chooses: a category the catalogue
// has never had must not push real boards out. Such a category's board is read through, never
// cached.
func TestBoardCacheKeepsRealBoards(t *testing.T) {
	a := &ratingAPI{newRankedAPI(t, func(c *config.Config) { c.LeaderboardSize, c.SnapshotInterval = 10, time.Hour })}
	a.item("phone1", "Phone One", "phones")
	if code, out := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones", "", ""); code != http.StatusOK {
		t.Fatalf("phones board: %d %v", code, out)
	}
	if !httpapi.BoardCached(a.srv, ranking.BoardTopRated, "phones", 10) {
		t.Fatal("the phones board is not cached after a read")
	}
	for i := range 3000 {
		code, out := a.do(http.MethodGet, fmt.Sprintf("/api/leaderboards/top-rated?category=junk%d&limit=%d", i, 1+i%10), "", "")
		if es := entries(t, out); code != http.StatusOK || len(es) != 0 {
			t.Fatalf("unknown category %d: %d %v, want an empty board", i, code, out)
		}
	}
	if !httpapi.BoardCached(a.srv, ranking.BoardTopRated, "phones", 10) {
		t.Fatal("3,000 made-up categories pushed the phones board out of the cache")
	}
	if n := httpapi.CachedBoards(a.srv); n > 10 {
		t.Fatalf("the cache holds %d boards after 3,000 made-up categories, want only real ones", n)
	}
}
