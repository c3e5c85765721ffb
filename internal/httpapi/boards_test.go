package httpapi_test

import (
	"net/http"
	"testing"
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
