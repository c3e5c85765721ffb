package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
)

// Hand-written JSON for the hot replies (an order, an error, the catalogue): the bytes are
// exactly what encoding/json writes for the same values (replies_test.go holds them to it),
// without per-request reflection or maps. Everything else uses c.JSON.

const jsonContentType = "application/json; charset=utf-8"

var jsonContentTypeValue = []string{jsonContentType}

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeJSON sends body as the reply with the given status.
func writeJSON(c *gin.Context, status int, body []byte) {
	c.Writer.Header()["Content-Type"] = jsonContentTypeValue
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body)
}

// writeError answers {"error":{"code","message"}} and aborts the chain.
func writeError(c *gin.Context, status int, code, msg string) {
	bp := replyBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"error":{"code":`...)
	b = appendString(b, code)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	if id := requestIDOf(c); id != "" {
		b = append(b, `,"request_id":`...)
		b = appendString(b, id)
	}
	b = append(b, "}}"...)
	c.Abort()
	writeJSON(c, status, b)
	*bp = b
	replyBufs.Put(bp)
}

// writeOrder answers {"order": Order}.
func writeOrder(c *gin.Context, status int, o orders.Order) {
	bp := replyBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"order":`...)
	b = appendOrder(b, o)
	b = append(b, '}')
	writeJSON(c, status, b)
	*bp = b
	replyBufs.Put(bp)
}

func appendOrder(b []byte, o orders.Order) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, o.ID)
	b = append(b, `,"item_id":`...)
	b = appendString(b, o.ItemID)
	b = append(b, `,"user_id":`...)
	b = appendString(b, o.UserID)
	b = append(b, `,"quantity":`...)
	b = strconv.AppendInt(b, o.Quantity, 10)
	b = append(b, `,"price_cents":`...)
	b = strconv.AppendInt(b, o.PriceCents, 10)
	b = append(b, `,"status":`...)
	b = appendString(b, string(o.Status))
	b = append(b, `,"created_at":`...)
	b = appendTime(b, o.CreatedAt)
	b = append(b, `,"expires_at":`...)
	b = appendTime(b, o.ExpiresAt)
	return append(b, '}')
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with the nanoseconds needed).
func appendTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		j, _ := json.Marshal(t) // encoding/json's own error path; never for our times
		return append(b, j...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendString writes s as a JSON string the way encoding/json does (HTML-safe escapes).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // the rare string that needs escaping
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// catalogueReplies caches the encoded GET /api/items and GET /api/items/{id} bodies for one
// snapshot generation, until the first item's status changes with time (a sale starts or
// ends). Encoding happens at most once per snapshot (every 500 ms by default), not per read.
type catalogueReplies struct {
	cur atomic.Pointer[encodedCatalogue]
	mu  sync.Mutex // one encoder at a time
}

type encodedCatalogue struct {
	gen   uint64
	until time.Time // the first status change by time; zero: none
	list  []byte
	etag  string // of list: the same bytes give the same tag, whichever snapshot they came from
	one   map[string][]byte
	ids   []string          // sorted
	cat   map[string]string // id -> category
	pages sync.Map          // pageQuery -> []byte: the paged or filtered lists asked for so far
	npage atomic.Int32      // entries in pages (bounded by maxCachedPages)
}

// maxCachedPages bounds the paged lists kept per snapshot generation; past it a page is
// encoded per request (from the items' cached bodies: a copy, not a marshal).
const maxCachedPages = 4096

// pageQuery is one GET /api/items?limit=&cursor=&category= request.
type pageQuery struct {
	limit            int
	cursor, category string
}

// page returns {"items":[...]} (with "next_cursor" when more follow) for q: the items after
// q.cursor (an item id, exclusive), of q.category if set, at most q.limit (0: all).
func (e *encodedCatalogue) page(q pageQuery) []byte {
	if b, ok := e.pages.Load(q); ok {
		return b.([]byte)
	}
	from, _ := slices.BinarySearch(e.ids, q.cursor)
	if from < len(e.ids) && e.ids[from] == q.cursor {
		from++
	}
	b := append(make([]byte, 0, 256), `{"items":[`...)
	n, last, next := 0, "", ""
	for _, id := range e.ids[from:] {
		if q.category != "" && e.cat[id] != q.category {
			continue
		}
		if q.limit > 0 && n == q.limit {
			next = last
			break
		}
		last = id
		if n > 0 {
			b = append(b, ',')
		}
		one := e.one[id] // {"item":{...}}
		b = append(b, one[len(`{"item":`):len(one)-1]...)
		n++
	}
	b = append(b, ']')
	if next != "" {
		b = append(b, `,"next_cursor":`...)
		b = appendString(b, next)
	}
	b = append(b, '}')
	if e.npage.Add(1) <= maxCachedPages {
		e.pages.Store(q, b)
	}
	return b
}

func (e *encodedCatalogue) fresh(gen uint64, now time.Time) bool {
	return e != nil && e.gen == gen && (e.until.IsZero() || now.Before(e.until))
}

// get returns the encoded catalogue for the current snapshot.
func (r *catalogueReplies) get(ctx context.Context, inv *inventory.Store) (*encodedCatalogue, error) {
	snap, gen, err := inv.Catalogue(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if e := r.cur.Load(); e.fresh(gen, now) {
		return e, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.cur.Load(); e.fresh(gen, now) {
		return e, nil
	}
	e, err := encodeCatalogue(snap, gen, now)
	if err != nil {
		return nil, err
	}
	r.cur.Store(e)
	return e, nil
}

func encodeCatalogue(snap map[string]inventory.Item, gen uint64, now time.Time) (*encodedCatalogue, error) {
	e := &encodedCatalogue{gen: gen, one: make(map[string][]byte, len(snap))}
	items := make([]inventory.Item, 0, len(snap))
	for _, it := range snap {
		it.Status = it.StatusAt(now)
		items = append(items, it)
		for _, t := range []*time.Time{it.StartsAt, it.EndsAt} {
			if t != nil && t.After(now) && (e.until.IsZero() || t.Before(e.until)) {
				e.until = *t
			}
		}
	}
	sortItems(items)
	e.ids = make([]string, len(items))
	e.cat = make(map[string]string, len(items))
	for i, it := range items {
		e.ids[i], e.cat[it.ID] = it.ID, it.Category
	}
	list, err := json.Marshal(gin.H{"items": items})
	if err != nil {
		return nil, err
	}
	e.list = list
	sum := sha256.Sum256(list)
	e.etag = `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`
	for _, it := range items {
		one, err := json.Marshal(gin.H{"item": it})
		if err != nil {
			return nil, err
		}
		e.one[it.ID] = one
	}
	return e, nil
}

var catalogueCacheControl = []string{"public, max-age=1"}

// listItems answers the whole catalogue, or with ?limit= (1..1000), ?cursor= (the
// next_cursor of the previous page) and ?category= one page or one category of it, with the
// catalogue's ETag: a client (or a CDN) that holds the current one gets 304 without a body.
func (s *Server) listItems(c *gin.Context) {
	q, err := readPageQuery(c)
	if err != nil {
		fail(c, err)
		return
	}
	e, err := s.catalogue.get(c.Request.Context(), s.Inventory)
	if err != nil {
		fail(c, err)
		return
	}
	h := c.Writer.Header()
	h["Etag"] = []string{e.etag}
	h["Cache-Control"] = catalogueCacheControl
	if etagMatches(c.Request.Header.Get("If-None-Match"), e.etag) {
		c.Writer.WriteHeader(http.StatusNotModified)
		c.Writer.WriteHeaderNow()
		return
	}
	if q == (pageQuery{}) {
		writeJSON(c, http.StatusOK, e.list)
		return
	}
	writeJSON(c, http.StatusOK, e.page(q))
}

// maxPageLimit bounds ?limit= of GET /api/items.
const maxPageLimit = 1000

func readPageQuery(c *gin.Context) (pageQuery, error) {
	var q pageQuery
	if c.Request.URL.RawQuery == "" {
		return q, nil
	}
	values := c.Request.URL.Query()
	for k := range values {
		if k != "limit" && k != "cursor" && k != "category" {
			return q, errInvalid(fmt.Sprintf("unknown query parameter %q (limit, cursor, category)", k))
		}
	}
	if v := values.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return q, errInvalid(fmt.Sprintf("limit must be an integer in 1..%d", maxPageLimit))
		}
		q.limit = n
	}
	if q.cursor = values.Get("cursor"); q.cursor != "" && !keyspace.ValidID(q.cursor) {
		return q, errInvalid("cursor must be the next_cursor of an earlier page")
	}
	if q.category = values.Get("category"); len(q.category) > 200 || !utf8.ValidString(q.category) {
		return q, errInvalid("category must be valid UTF-8 of at most 200 bytes")
	}
	return q, nil
}

// etagMatches reports whether an If-None-Match header names tag (RFC 9110: weak comparison,
// a list of tags, or "*").
func etagMatches(header, tag string) bool {
	for header != "" {
		var t string
		t, header, _ = strings.Cut(header, ",")
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == tag || t == "*" {
			return true
		}
	}
	return false
}

func (s *Server) getItem(c *gin.Context) {
	e, err := s.catalogue.get(c.Request.Context(), s.Inventory)
	if err != nil {
		fail(c, err)
		return
	}
	body, ok := e.one[c.Param("id")]
	if !ok {
		fail(c, inventory.ErrNotFound)
		return
	}
	writeJSON(c, http.StatusOK, body)
}

func sortItems(items []inventory.Item) {
	slices.SortFunc(items, func(a, b inventory.Item) int { return strings.Compare(a.ID, b.ID) })
}
