package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// catalogueReplies caches the encoded GET /api/items and GET /api/items/{id} bodies for one
// snapshot generation, until the first item's status changes with time (a sale starts or
// ends). Encoding happens at most once per snapshot (every 500 ms by default), not per read.
type catalogueReplies struct {
	cur atomic.Pointer[encodedCatalogue]
	mu  sync.Mutex // one encoder at a time
}

type encodedCatalogue struct {
	gen   uint64
	seq   uint64                    // numbers the encodings in the order they were made (the stream keeps the newest)
	src   map[string]inventory.Item // the snapshot encoded (snapshots are never modified)
	at    time.Time                 // the time its statuses were taken at
	until time.Time                 // the first status change by time; zero: none
	list  []byte
	full  *listBody // list, and its gzip encoding once asked for
	etag  string    // of list: the same bytes give the same tag, whichever snapshot they came from
	// The ETag header's values: the tag, and its weak form for gzip-compressed replies.
	etagHeader, weakEtagHeader []string
	one                        map[string][]byte
	ids                        []string            // sorted
	cat                        map[string]string   // id -> category
	categories                 map[string]struct{} // every category of the snapshot
	pages                      sync.Map            // pageQuery -> *listBody: the paged or filtered lists asked for so far
	npage                      atomic.Int32        // entries in pages (bounded by maxCachedPages)
	pageBytes                  atomic.Int64        // their plain bytes (bounded by maxCachedPageBytes)
}

// listBody is one encoded list reply and, once a client that accepts gzip asked for it, its
// gzip encoding: compressed once per snapshot generation, not per request.
type listBody struct {
	plain  []byte
	gzOnce sync.Once
	gz     []byte
	// The Content-Length header's values of plain and gz, made with them rather than per reply.
	plainLen, gzLen []string
}

func newListBody(plain []byte) *listBody {
	return &listBody{plain: plain, plainLen: []string{strconv.Itoa(len(plain))}}
}

// gzipMin: a list shorter than this goes plain even to a client that accepts gzip (it fits in
// a packet either way).
const gzipMin = 1400

func (b *listBody) gzipped() []byte {
	b.gzOnce.Do(func() {
		var buf bytes.Buffer
		buf.Grow(len(b.plain) / 4)
		zw, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		_, _ = zw.Write(b.plain)
		_ = zw.Close()
		b.gz = buf.Bytes()
		b.gzLen = []string{strconv.Itoa(len(b.gz))}
	})
	return b.gz
}

// maxCachedPages and maxCachedPageBytes bound the paged lists kept per snapshot generation;
// past either a page is encoded per request (from the items' cached bodies: a copy, not a
// marshal). The bytes matter as much as the number: any valid id is a cursor, so without them
// ?limit=1000 with ever new cursors would keep 4096 pages of 1,000 items (~1.4 GB).
const (
	maxCachedPages     = 4096
	maxCachedPageBytes = 32 << 20
)

// pageQuery is one GET /api/items?limit=&cursor=&category= request.
type pageQuery struct {
	limit            int
	cursor, category string
}

// page returns {"items":[...]} (with "next_cursor" when more follow) for q: the items after
// q.cursor (an item id, exclusive), of q.category if set, at most q.limit (0: all).
func (e *encodedCatalogue) page(q pageQuery) *listBody {
	if b, ok := e.pages.Load(q); ok {
		return b.(*listBody)
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
		b = jsonx.AppendString(b, next)
	}
	b = append(b, '}')
	body := newListBody(b)
	if e.npage.Add(1) <= maxCachedPages && e.reservePageBytes(len(b)) {
		e.pages.Store(q, body)
	}
	return body
}

// reservePageBytes takes n bytes of the generation's page budget, if they fit.
func (e *encodedCatalogue) reservePageBytes(n int) bool {
	for {
		used := e.pageBytes.Load()
		if used+int64(n) > maxCachedPageBytes {
			return false
		}
		if e.pageBytes.CompareAndSwap(used, used+int64(n)) {
			return true
		}
	}
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
	prev := r.cur.Load()
	e, err := encodeCatalogue(snap, gen, now, prev)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		e.seq = prev.seq + 1
	}
	r.cur.Store(e)
	return e, nil
}

// encodeCatalogue encodes snap (generation gen) as seen at now, byte for byte as encoding/json
// would. An item unchanged since prev keeps its bytes, so a change to a few items costs a few
// marshals and a copy. An archived item keeps a body (status ended) but leaves the list.
func encodeCatalogue(snap map[string]inventory.Item, gen uint64, now time.Time, prev *encodedCatalogue) (*encodedCatalogue, error) {
	e := &encodedCatalogue{gen: gen, src: snap, at: now, one: make(map[string][]byte, len(snap)),
		cat: make(map[string]string, len(snap)), categories: map[string]struct{}{}, ids: sortedIDs(snap, prev)}
	size := 16
	if prev != nil {
		size += len(prev.list)
	}
	list := append(make([]byte, 0, size), `{"items":[`...)
	listed := 0
	for _, id := range allIDs(snap, e.ids) {
		it := snap[id]
		it.Status = it.StatusAt(now)
		for _, t := range []*time.Time{it.StartsAt, it.EndsAt} {
			if t != nil && t.After(now) && (e.until.IsZero() || t.Before(e.until)) {
				e.until = *t
			}
		}
		var one []byte
		if prev != nil {
			if was, ok := prev.src[id]; ok {
				was.Status = was.StatusAt(prev.at)
				if sameEncoding(was, it) {
					one = prev.one[id]
				}
			}
		}
		if one == nil {
			var err error
			if one, err = json.Marshal(gin.H{"item": it}); err != nil {
				return nil, err
			}
		}
		e.one[id] = one
		e.categories[it.Category] = struct{}{} // an archived item's board stays
		if it.ArchivedAt != nil {
			continue
		}
		e.cat[id] = it.Category
		if listed > 0 {
			list = append(list, ',')
		}
		listed++
		list = append(list, one[len(`{"item":`):len(one)-1]...) // {"item":{...}} -> {...}
	}
	list = append(list, "]}"...)
	e.list, e.full = list, newListBody(list)
	sum := sha256.Sum256(list)
	e.etag = `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`
	e.etagHeader, e.weakEtagHeader = []string{e.etag}, []string{"W/" + e.etag}
	return e, nil
}

// sortedIDs returns the ids of snap's listed (not archived) items in order: prev's when snap
// lists the same items (the usual change: stock moved), else sorted afresh.
func sortedIDs(snap map[string]inventory.Item, prev *encodedCatalogue) []string {
	listed := 0
	for _, it := range snap {
		if it.ArchivedAt == nil {
			listed++
		}
	}
	if prev != nil && len(prev.ids) == listed {
		same := true
		for _, id := range prev.ids {
			if it, ok := snap[id]; !ok || it.ArchivedAt != nil {
				same = false
				break
			}
		}
		if same {
			return prev.ids
		}
	}
	ids := make([]string, 0, listed)
	for id, it := range snap {
		if it.ArchivedAt == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// allIDs is listed (sorted, from sortedIDs) followed by snap's archived items, which have a
// body of their own but no place in the list.
func allIDs(snap map[string]inventory.Item, listed []string) []string {
	if len(listed) == len(snap) {
		return listed
	}
	all := slices.Clip(listed)
	for id, it := range snap {
		if it.ArchivedAt != nil {
			all = append(all, id)
		}
	}
	return all
}

// sameEncoding reports whether a and b encode as the same JSON: every field the contract's
// Item shows (TestSameEncodingCoversEveryField holds it to the struct's json tags).
func sameEncoding(a, b inventory.Item) bool {
	sameTime := func(x, y *time.Time) bool {
		return x == y || (x != nil && y != nil && x.Equal(*y) && x.Location() == y.Location())
	}
	sameQueue := func(x, y *inventory.QueueSettings) bool { return x == y || (x != nil && y != nil && *x == *y) }
	sameString := func(x, y *string) bool { return x == y || (x != nil && y != nil && *x == *y) }
	return a.ID == b.ID && a.Name == b.Name && a.Category == b.Category && a.PriceCents == b.PriceCents &&
		a.StockTotal == b.StockTotal && a.StockLeft == b.StockLeft && a.PerUserLimit == b.PerUserLimit &&
		a.Status == b.Status && sameTime(a.StartsAt, b.StartsAt) && sameTime(a.EndsAt, b.EndsAt) && sameQueue(a.Queue, b.Queue) &&
		sameString(a.ImageURL, b.ImageURL)
}

var (
	catalogueCacheControl = []string{"public, max-age=1"}
	varyAcceptEncoding    = []string{"Accept-Encoding"}
	gzipEncoding          = []string{"gzip"}
)

// listItems answers the catalogue, or one page (?limit= 1..1000, ?cursor=) or category of it,
// with the catalogue's ETag (304 to a client holding it). A list of gzipMin bytes or more goes
// gzip-compressed to a client that accepts it, under the weak form of the tag, as the bytes
// differ (RFC 9110 8.8.1).
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
	body := e.full
	if q != (pageQuery{}) {
		body = e.page(q)
	}
	gz := len(body.plain) >= gzipMin && acceptsGzip(headerValue(c.Request, "Accept-Encoding"))
	h := c.Writer.Header()
	if gz {
		h["Etag"] = e.weakEtagHeader
	} else {
		h["Etag"] = e.etagHeader
	}
	h["Cache-Control"] = catalogueCacheControl
	h["Vary"] = varyAcceptEncoding
	if etagMatches(headerValue(c.Request, "If-None-Match"), e.etag) {
		c.Writer.WriteHeader(http.StatusNotModified)
		c.Writer.WriteHeaderNow()
		return
	}
	if gz {
		h["Content-Encoding"] = gzipEncoding
		gzipped := body.gzipped()
		writeSized(c, http.StatusOK, gzipped, body.gzLen)
		return
	}
	writeSized(c, http.StatusOK, body.plain, body.plainLen)
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip (RFC 9110 12.5.3): named
// (gzip or x-gzip) with a q above 0, or not named and "*" with a q above 0. (A header that
// spells gzip in capitals is answered plain, which every client accepts.)
func acceptsGzip(header string) bool {
	if !strings.Contains(header, "gzip") && !strings.Contains(header, "*") {
		return false
	}
	gz, star := -1.0, -1.0 // q of each; -1: not named
	for header != "" {
		var part string
		part, header, _ = strings.Cut(header, ",")
		name, params, _ := strings.Cut(part, ";")
		q := 1.0
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			if k, v, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				} else {
					q = 0
				}
			}
		}
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "gzip", "x-gzip":
			gz = q
		case "*":
			star = q
		}
	}
	if gz >= 0 {
		return gz > 0
	}
	return star > 0
}

// maxPageLimit bounds ?limit= of GET /api/items.
const maxPageLimit = 1000

// readPageQuery reads ?limit=&cursor=&category= as url.Values would (the first of a repeated
// parameter counts; a pair that does not unescape is left out), without building the map.
func readPageQuery(c *gin.Context) (pageQuery, error) {
	var q pageQuery
	var limit, cursor, category string
	var seen [3]bool
	for raw := c.Request.URL.RawQuery; raw != ""; {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		if v, err = url.QueryUnescape(v); err != nil {
			continue
		}
		var i int
		var dst *string
		switch k {
		case "limit":
			i, dst = 0, &limit
		case "cursor":
			i, dst = 1, &cursor
		case "category":
			i, dst = 2, &category
		default:
			return q, errInvalid(fmt.Sprintf("unknown query parameter %q (limit, cursor, category)", k))
		}
		if !seen[i] {
			seen[i], *dst = true, v
		}
	}
	if v := limit; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return q, errInvalid(fmt.Sprintf("limit must be an integer in 1..%d", maxPageLimit))
		}
		q.limit = n
	}
	if q.cursor = cursor; q.cursor != "" && !keyspace.ValidID(q.cursor) {
		return q, errInvalid("cursor must be the next_cursor of an earlier page")
	}
	if q.category = category; len(q.category) > 200 || !utf8.ValidString(q.category) {
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

// checkItemID answers a malformed item id in an item route's path (/items/:id, with or without
// more after it) 400 invalid_request, as the contract says, before any handler or store sees
// it; an id of the right form that names no item stays 404. It runs on every request: the id
// check comes first and is a short byte loop.
func checkItemID(c *gin.Context) {
	if id, ok := c.Params.Get("id"); ok && !keyspace.ValidID(id) && strings.Contains(c.FullPath(), "/items/:id") {
		fail(c, errBadItemID)
	}
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
