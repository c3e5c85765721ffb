package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/ranking"
)

func init() {
	mapError(ranking.ErrNotABuyer, http.StatusConflict, "not_a_buyer")
	mapError(ranking.ErrInvalid, http.StatusBadRequest, "invalid_request")
}

// defaultBoardLimit is the number of entries a leaderboard read returns without ?limit=.
const defaultBoardLimit = 10

// rateItem sets the caller's stars for an item they paid for.
func (s *Server) rateItem(c *gin.Context) {
	var body struct {
		Stars *int `json:"stars"`
	}
	if err := decodeJSON(c, maxBody, &body); err != nil {
		fail(c, err)
		return
	}
	if body.Stars == nil || *body.Stars < ranking.MinStars || *body.Stars > ranking.MaxStars {
		fail(c, errInvalid("stars must be an integer from 1 to 5"))
		return
	}
	ctx := c.Request.Context()
	it, err := s.item(ctx, c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	r, err := s.Ranking.Rate(ctx, it.ID, it.Category, userOf(c), *body.Stars)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, r)
}

// item finds an item in the catalogue snapshot, or in Redis when the snapshot has not seen
// it yet (created on another instance within the last snapshot interval).
func (s *Server) item(ctx context.Context, id string) (inventory.Item, error) {
	it, err := s.Inventory.Lookup(ctx, id)
	if errors.Is(err, inventory.ErrNotFound) {
		return s.Inventory.Get(ctx, id)
	}
	return it, err
}

func (s *Server) topRated(c *gin.Context) {
	limit, ok := s.boardLimit(c)
	if !ok {
		return
	}
	entries, err := s.Ranking.TopRated(c.Request.Context(), c.Query("category"), limit)
	s.board(c, ranking.BoardTopRated, entries, err)
}

func (s *Server) bestSellers(c *gin.Context) {
	limit, ok := s.boardLimit(c)
	if !ok {
		return
	}
	entries, err := s.Ranking.BestSellers(c.Request.Context(), limit)
	s.board(c, ranking.BoardBestSellers, entries, err)
}

// boardLimit parses ?limit= (1..N, default 10 or N if smaller); a bad value is answered 400.
func (s *Server) boardLimit(c *gin.Context) (int, bool) {
	n := s.Ranking.Size()
	v, given := c.GetQuery("limit")
	if !given {
		return min(defaultBoardLimit, n), true
	}
	limit, err := strconv.Atoi(v)
	if err != nil || limit < 1 || limit > n {
		fail(c, errInvalid(fmt.Sprintf("limit must be an integer from 1 to %d", n)))
		return 0, false
	}
	return limit, true
}

// board answers a leaderboard read, naming the items from the in-process catalogue so the
// read stays one Redis round trip.
func (s *Server) board(c *gin.Context, name string, entries []ranking.Entry, err error) {
	if err != nil {
		fail(c, err)
		return
	}
	for i := range entries {
		if it, err := s.Inventory.Lookup(c.Request.Context(), entries[i].ItemID); err == nil {
			entries[i].Name = it.Name
		}
	}
	c.JSON(http.StatusOK, gin.H{"board": name, "entries": entries})
}
