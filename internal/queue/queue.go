// Package queue owns the waiting rooms (docs/waiting-room.md): joining the line, admitting in a
// fair order at a bounded rate, signed tickets and passes checked without Redis, and polls
// answered from memory. The purchase script spends a pass; the rest is here and in lua/queue/.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/batch"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// Sentinel errors; the HTTP layer maps them to the contract's codes. An unknown item is
// inventory.ErrNotFound, a join after the end inventory.ErrSaleEnded, a bad pass
// inventory.ErrQueueRequired.
var (
	ErrNoQueue   = errors.New("this item has no waiting room")
	ErrNotJoined = errors.New("you have not joined this item's waiting room")
)

// Ticket states as the contract names them.
const (
	StateWaiting  = "waiting"
	StateAdmitted = "admitted"
	StateExpired  = "expired"
	StateSpent    = "spent"
	StateSoldOut  = "sold_out"
)

// Ticket is a shopper's place in an item's waiting room, as the contract shows it.
type Ticket struct {
	ItemID        string
	UserID        string
	State         string
	Position      int64 // 0: null (before the start, or not waiting)
	ETASeconds    int64 // -1: null (unknown)
	PollAfterMS   int64 // -1: null (stop polling)
	Token         string
	Pass          string // "" unless admitted
	PassExpiresAt time.Time
}

// Options tune a Store; a zero JoinBatch takes the default.
type Options struct {
	Tick      time.Duration // admission step of every queued item (used as given)
	JoinBatch int           // most joins coalesced into one script call, default 64
}

// Catalogue is what the waiting room needs of the inventory: the items (their queue
// settings, sale window and stock) from its snapshot; Queued only those with a waiting room.
type Catalogue interface {
	Queued(ctx context.Context) ([]inventory.Item, error)
	Lookup(ctx context.Context, id string) (inventory.Item, error)
	// Known reports whether id may name an item, from memory for every item the catalogue
	// holds (inventory.Store.Known): a join of a made-up id costs Redis next to nothing.
	Known(ctx context.Context, id string) bool
}

// Store is the waiting rooms of all items over Redis.
type Store struct {
	rdb    redis.UniversalClient
	keys   keyspace.Space
	signer *Signer
	cat    Catalogue
	opt    Options

	joins *batch.Batcher[joinCall]
	lines sync.Map // item id -> *line: what this instance last learnt of each line (view.go)
	spent sync.Map // spentKey -> expiry (time.Time): passes this instance saw spent

	checked ticketCache // ticket tokens whose signature held, so a repeated poll skips the HMAC

	// Counters for metrics and the bench: polls answered from memory or from Redis.
	PollsFromMemory, PollsFromRedis atomic.Int64
}

// NewStore returns the waiting rooms over rdb, signing with signer.
func NewStore(rdb redis.UniversalClient, keys keyspace.Space, signer *Signer, cat Catalogue, opt Options) *Store {
	if opt.JoinBatch <= 0 {
		opt.JoinBatch = 64
	}
	s := &Store{rdb: rdb, keys: keys, signer: signer, cat: cat, opt: opt}
	s.joins = batch.New(opt.JoinBatch, 1, 0, s.runJoins)
	return s
}

// CheckPass checks a pass (the Queue-Pass header) for user's purchase of item without a Redis call
// and returns its pass id for the purchase script, which spends it. A missing, forged, expired,
// another's or spent pass is inventory.ErrQueueRequired; with replay (an Idempotency-Key) an
// expired or spent genuine pass still goes to the script, which lets only a replay through.
func (s *Store) CheckPass(pass, item, user string, replay bool, now time.Time) (string, error) {
	if pass == "" {
		return "", fmt.Errorf("%w (no Queue-Pass header)", inventory.ErrQueueRequired)
	}
	c, ok := s.signer.verifyPass(pass)
	if !ok || c.item != item || c.user != user {
		return "", fmt.Errorf("%w (the pass is not valid for this shopper and item)", inventory.ErrQueueRequired)
	}
	if replay {
		return c.id, nil
	}
	if now.UnixMilli() >= c.expiresMS {
		return "", fmt.Errorf("%w (the pass has expired: join again)", inventory.ErrQueueRequired)
	}
	if _, gone := s.spent.Load(spentKey{c.item, c.id}); gone {
		return "", fmt.Errorf("%w (the pass has been used)", inventory.ErrQueueRequired)
	}
	return c.id, nil
}

// Spent records that a purchase with pass succeeded (the script spent it), so this instance
// refuses the pass from memory from now until it expires.
func (s *Store) Spent(pass string) {
	if c, ok := s.signer.verifyPass(pass); ok {
		s.spent.Store(spentKey{c.item, c.id}, time.UnixMilli(c.expiresMS))
	}
}

// spentKey names a spent pass: pass ids are numbered per item ("<user>.<n>"), so a shopper
// first in two lines holds the same id on both, and spending one must not refuse the other.
type spentKey struct{ item, id string }

// forgetSpent drops remembered spent passes past their expiry (they are refused as expired).
func (s *Store) forgetSpent(now time.Time) {
	s.spent.Range(func(k, v any) bool {
		if now.After(v.(time.Time)) {
			s.spent.Delete(k)
		}
		return true
	})
}
