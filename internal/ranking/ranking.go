// Package ranking owns ratings and the bounded top-N leaderboards (top-rated overall and per
// category, best sellers). Everything lives in the ranking slot {rank} (see docs/design.md):
// ratings are far rarer than purchases, so one slot keeps each rating one atomic script.
package ranking

import (
	"errors"
	"strings"
)

// Sentinel errors; the HTTP layer maps them to the contract's codes.
var (
	// ErrNotABuyer means the user has no paid order for the item.
	ErrNotABuyer = errors.New("only buyers with a paid order may rate this item")
	// ErrInvalid means an argument is out of range (stars, limit, id, category).
	ErrInvalid = errors.New("invalid request")
)

// Board names, as the contract's leaderboard responses spell them.
const (
	BoardTopRated    = "top-rated"
	BoardBestSellers = "best-sellers"
)

// MinStars and MaxStars bound a rating.
const (
	MinStars = 1
	MaxStars = 5
)

// MaxCategory is the longest category name (as inventory accepts it).
const MaxCategory = 64

// Options configure a Store.
type Options struct {
	// Size is the bound N of every board.
	Size int
	// PriorMean (m, 1..5) and PriorWeight (C >= 0, 0 = plain mean) make the
	// top-rated score the Bayesian average (C*m + sum) / (C + count): an item starts as C
	// ratings of m stars, so a few high ratings cannot beat many slightly lower ones.
	PriorMean   float64
	PriorWeight float64
}

// Rating is an item's ratings after a rating was set.
type Rating struct {
	ItemID  string  `json:"item_id"`
	Average float64 `json:"average"` // plain mean of the stars
	Count   int64   `json:"count"`
}

// Entry is one line of a leaderboard, best first. Name is left for the caller to fill from
// its catalogue, so a read stays one Redis round trip.
type Entry struct {
	Rank   int     `json:"rank"`
	ItemID string  `json:"item_id"`
	Name   string  `json:"name"`
	Score  float64 `json:"score"`
}

// Score is the top-rated score of count ratings summing to sum, computed exactly as rate.lua
// does (same operations in the same order, so the same float64).
func Score(priorMean, priorWeight float64, count, sum int64) float64 {
	return (priorWeight*priorMean + float64(sum)) / (priorWeight + float64(count))
}

// itemOf returns the item id of a board member: top-rated members are "<inverted count>:<item>"
// (the count breaks ties), best-seller members are the item id.
func itemOf(member string) string {
	if i := strings.LastIndexByte(member, ':'); i >= 0 {
		return member[i+1:]
	}
	return member
}
