package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/ranking"
)

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
	// The item's own record, not the catalogue snapshot: a snapshot older than a category
	// change would put the item back on its old category's board.
	it, err := s.Inventory.Get(ctx, c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	r, err := s.Ranking.Rate(ctx, it.ID, it.Category, userOf(c), *body.Stars)
	if err != nil {
		fail(c, err)
		return
	}
	s.boards.forget() // the rater sees the change at once on this instance
	c.JSON(http.StatusOK, r)
}

func (s *Server) topRated(c *gin.Context) {
	limit, ok := s.boardLimit(c)
	if !ok {
		return
	}
	category := c.Query("category")
	s.cachedBoard(c, ranking.BoardTopRated, category, limit, func(ctx context.Context) ([]ranking.Entry, error) {
		return s.Ranking.TopRated(ctx, category, limit)
	})
}

func (s *Server) bestSellers(c *gin.Context) {
	limit, ok := s.boardLimit(c)
	if !ok {
		return
	}
	s.cachedBoard(c, ranking.BoardBestSellers, "", limit, func(ctx context.Context) ([]ranking.Entry, error) {
		return s.Ranking.BestSellers(ctx, limit)
	})
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

// Leaderboard replies come from boards.go's short-lived cache (one Redis read per board per
// snapshot interval), with item names from the in-process catalogue.
