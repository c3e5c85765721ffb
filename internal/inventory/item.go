// Package inventory owns items, their stock and purchases: the catalogue, admin stock
// changes, and the purchase script that reserves stock for a shopper.
package inventory

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Sentinel errors; the HTTP layer maps them to the contract's codes.
var (
	ErrNotFound       = errors.New("item not found")
	ErrInvalid        = errors.New("invalid request")
	ErrInvalidState   = errors.New("stock change not allowed")
	ErrSoldOut        = errors.New("not enough stock left")
	ErrLimitExceeded  = errors.New("per-user limit exceeded")
	ErrSaleNotStarted = errors.New("sale has not started")
	ErrSaleEnded      = errors.New("sale has ended")
	// ErrQueueRequired: the item has a waiting room and the purchase carried no valid,
	// unspent pass of this shopper for it.
	ErrQueueRequired = errors.New("this item sells only to shoppers admitted from its waiting room: join it and buy with your pass")
	// ErrRestoring: a restore is rebuilding the item from the record (its hash is missing
	// meanwhile); creating it now would sell it beside the orders being restored. Nothing
	// was changed; try again once the restore finished.
	ErrRestoring = errors.New("the item is being restored from the record; nothing was changed, try again")
	// ErrNotAdmitted: Options.Admit refused the purchase (the outbox over its bound); nothing
	// was changed. The error also wraps Admit's own and reads as it (notAdmitted).
	ErrNotAdmitted = errors.New("purchase not admitted")
)

// notAdmitted is Admit's refusal as Purchase returns it: errors.Is finds both ErrNotAdmitted
// and the refusal itself, and the message is the refusal's.
type notAdmitted struct{ refusal error }

func (e notAdmitted) Error() string   { return e.refusal.Error() }
func (e notAdmitted) Unwrap() []error { return []error{ErrNotAdmitted, e.refusal} }

// QueueSettings give an item a waiting room (docs/waiting-room.md); nil: none.
type QueueSettings struct {
	AdmitPerSecond int64 `json:"admit_per_second"`
	MaxActive      int64 `json:"max_active"`
	PassTTLSeconds int64 `json:"pass_ttl_seconds"`
}

// Validate checks the settings' ranges; the error message is for the client.
func (q QueueSettings) Validate() error {
	switch {
	case q.AdmitPerSecond < 1 || q.AdmitPerSecond > 100000:
		return fmt.Errorf("%w: queue.admit_per_second must be 1..100000", ErrInvalid)
	case q.MaxActive < 1 || q.MaxActive > 1000000:
		return fmt.Errorf("%w: queue.max_active must be 1..1000000", ErrInvalid)
	case q.PassTTLSeconds < 1 || q.PassTTLSeconds > 86400:
		return fmt.Errorf("%w: queue.pass_ttl_seconds must be 1..86400", ErrInvalid)
	}
	return nil
}

// Status of an item as shoppers see it.
const (
	StatusUpcoming = "upcoming"
	StatusLive     = "live"
	StatusSoldOut  = "sold_out"
	StatusEnded    = "ended"
	// StatusArchived is shown only to admins: shoppers see an archived item as ended.
	StatusArchived = "archived"
)

// Item is the contract's Item plus the counters the reconciler and boards need.
type Item struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Category     string     `json:"category"`
	PriceCents   int64      `json:"price_cents"`
	StockTotal   int64      `json:"stock_total"`
	StockLeft    int64      `json:"stock_left"`
	PerUserLimit int64      `json:"per_user_limit"`
	StartsAt     *time.Time `json:"starts_at"`
	EndsAt       *time.Time `json:"ends_at"`
	Status       string     `json:"status"`
	// Queue is the item's waiting room (null: none).
	Queue *QueueSettings `json:"queue"`
	// ImageURL is the item's picture (null: none).
	ImageURL *string `json:"image_url"`

	// ArchivedAt is when the item was taken off sale for good (nil: it was not).
	ArchivedAt *time.Time `json:"-"`

	Reserved int64 `json:"-"`
	Paid     int64 `json:"-"`
	Version  int64 `json:"-"`
}

// StatusAt computes the item's status at now, as shoppers see it.
func (it Item) StatusAt(now time.Time) string {
	switch {
	case it.ArchivedAt != nil:
		return StatusEnded
	case it.StartsAt != nil && now.Before(*it.StartsAt):
		return StatusUpcoming
	case it.EndsAt != nil && !now.Before(*it.EndsAt):
		return StatusEnded
	case it.StockLeft <= 0:
		return StatusSoldOut
	default:
		return StatusLive
	}
}

// AdminStatusAt is StatusAt as admins see it: an archived item says so.
func (it Item) AdminStatusAt(now time.Time) string {
	if it.ArchivedAt != nil {
		return StatusArchived
	}
	return it.StatusAt(now)
}

// Input is an item as an admin writes it (PUT or one import row).
type Input struct {
	ID           string
	Name         string
	Category     string
	PriceCents   int64
	Stock        *int64 // nil: keep (0 on create)
	PerUserLimit int64
	StartsAt     *time.Time
	EndsAt       *time.Time
	// Queue: the waiting room. KeepQueue leaves the current one as it is (an import row has no
	// queue column); otherwise nil removes it.
	Queue     *QueueSettings
	KeepQueue bool
	// ImageURL is the item's picture ("" for none); KeepImage leaves the current one as it is
	// (an import row without the column).
	ImageURL  string
	KeepImage bool
}

// MaxImageURL is the longest image_url accepted, in bytes.
const MaxImageURL = 2048

// Validate checks an Input against the contract; the error message is for the client.
func (in Input) Validate() error {
	switch {
	case !keyspace.ValidID(in.ID):
		return fmt.Errorf("%w: id must match [A-Za-z0-9_-]{1,64}", ErrInvalid)
	case in.Name == "" || len(in.Name) > 200:
		return fmt.Errorf("%w: name is required (at most 200 bytes)", ErrInvalid)
	case !plainText(in.Name):
		return fmt.Errorf("%w: name must be UTF-8 text without control characters, bidi controls or zero-width characters", ErrInvalid)
	case len(in.Category) > 64:
		return fmt.Errorf("%w: category is at most 64 bytes", ErrInvalid)
	case !plainText(in.Category):
		return fmt.Errorf("%w: category must be UTF-8 text without control characters, bidi controls or zero-width characters", ErrInvalid)
	case in.PriceCents < 0 || in.PriceCents > 1e12:
		return fmt.Errorf("%w: price_cents must be 0..1000000000000", ErrInvalid)
	case in.Stock != nil && (*in.Stock < 0 || *in.Stock > 1e12):
		return fmt.Errorf("%w: stock must be 0..1000000000000", ErrInvalid)
	case in.PerUserLimit < 1 || in.PerUserLimit > 1e9:
		return fmt.Errorf("%w: per_user_limit must be at least 1", ErrInvalid)
	case in.StartsAt != nil && in.StartsAt.UnixMilli() < 0:
		return fmt.Errorf("%w: starts_at before 1970", ErrInvalid)
	case in.EndsAt != nil && in.StartsAt != nil && !in.EndsAt.After(*in.StartsAt):
		return fmt.Errorf("%w: ends_at must be after starts_at", ErrInvalid)
	case in.EndsAt != nil && in.EndsAt.UnixMilli() <= 0:
		return fmt.Errorf("%w: ends_at before 1970", ErrInvalid)
	case len(in.ImageURL) > MaxImageURL:
		return fmt.Errorf("%w: image_url is at most %d characters", ErrInvalid, MaxImageURL)
	case in.ImageURL != "" && !validImageURL(in.ImageURL):
		return fmt.Errorf("%w: image_url must be an https:// URL or a path on this host starting with /", ErrInvalid)
	case in.Queue != nil:
		return in.Queue.Validate()
	}
	return nil
}

// validImageURL reports whether u is an https:// URL with a host (no user or password) or a
// path on this host ("/img/x.png", not "//elsewhere"), written without spaces, quotes, angle
// brackets, backslashes or control characters: the pages put it in an img element's src, and
// the pages' Content-Security-Policy allows images from this host and https: only.
func validImageURL(u string) bool {
	if !utf8.ValidString(u) {
		return false
	}
	for _, r := range u {
		if unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("\"'<>\\`", r) {
			return false
		}
	}
	if strings.HasPrefix(u, "/") {
		return !strings.HasPrefix(u, "//")
	}
	p, err := url.Parse(u)
	return err == nil && p.Scheme == "https" && p.Host != "" && p.User == nil && p.Hostname() != ""
}

// plainText reports whether s is valid UTF-8 without control characters (C0, DEL, C1): a NUL
// is refused by Postgres and would stop the record, and a newline or escape code has no place
// in a name shown on a page or a report. Nor have characters that make a name show as
// something else (invisibleRune).
func plainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || invisibleRune(r) {
			return false
		}
	}
	return true
}

// invisibleRune reports a bidi control (marks, embeddings, overrides, isolates: they reorder
// the text around them) or a zero-width character (a name that looks like another's).
func invisibleRune(r rune) bool {
	switch {
	case r >= 0x200B && r <= 0x200F, // zero-width space, non-joiner, joiner; LRM, RLM
		r >= 0x202A && r <= 0x202E,            // LRE, RLE, PDF, LRO, RLO
		r >= 0x2060 && r <= 0x2064,            // word joiner, invisible operators
		r >= 0x2066 && r <= 0x2069,            // LRI, RLI, FSI, PDI
		r == 0xFEFF, r == 0x061C, r == 0x180E: // zero-width no-break space, ALM, Mongolian vowel separator
		return true
	}
	return false
}

// itemFromHash builds an Item from its Redis hash fields.
func itemFromHash(id string, h map[string]string) (Item, error) {
	num := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	if _, ok := h["stock_total"]; !ok {
		return Item{}, ErrNotFound
	}
	it := Item{
		ID: id, Name: h["name"], Category: h["category"], PriceCents: num("price_cents"),
		StockTotal: num("stock_total"), StockLeft: num("stock_left"),
		PerUserLimit: num("per_user_limit"), Reserved: num("reserved"), Paid: num("paid"),
		Version: num("version"),
	}
	if q := (QueueSettings{num("q_rate"), num("q_max"), num("q_ttl")}); q.AdmitPerSecond > 0 {
		it.Queue = &q
	}
	if ms := num("starts_at"); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		it.StartsAt = &t
	}
	if ms := num("ends_at"); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		it.EndsAt = &t
	}
	if u := h["image_url"]; u != "" {
		it.ImageURL = &u
	}
	if ms := num("archived_at"); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		it.ArchivedAt = &t
	}
	return it, nil
}

// pairs turns a flat HGETALL-style reply into a map.
func pairs(v any) map[string]string {
	arr, _ := v.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		m[k] = fmt.Sprint(arr[i+1])
	}
	return m
}
