// Package ranking owns ratings and the bounded top-N leaderboards (top-rated overall and per
// category, best sellers).
package ranking

// Store keeps ratings and leaderboards in Redis. (Built in issue 5.)
type Store struct{}
