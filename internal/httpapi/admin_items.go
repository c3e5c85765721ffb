package httpapi

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/payment"
)

// itemBody is the admin's item JSON (PUT body, and one element of a JSON import).
type itemBody struct {
	ID           *string `json:"id,omitempty"`
	Name         *string `json:"name"`
	Category     *string `json:"category"`
	PriceCents   *int64  `json:"price_cents"`
	Stock        *int64  `json:"stock"`
	PerUserLimit *int64  `json:"per_user_limit"`
	StartsAt     *string `json:"starts_at"`
	EndsAt       *string `json:"ends_at"`
	// Queue is the waiting room (null or absent: none; an import row without it keeps the
	// item's current one).
	Queue *inventory.QueueSettings `json:"queue"`
	// ImageURL is the item's picture (null or absent: none; an import row without it keeps
	// the item's current one).
	ImageURL *string `json:"image_url"`
}

// input turns the body into an inventory.Input; the error names the bad field.
func (b itemBody) input(id string) (inventory.Input, error) {
	in := inventory.Input{ID: id, Stock: b.Stock, Queue: b.Queue}
	if b.ImageURL != nil {
		in.ImageURL = strings.TrimSpace(*b.ImageURL)
	}
	if b.Name == nil {
		return in, fmt.Errorf("name is required")
	}
	in.Name = *b.Name
	if b.Category != nil {
		in.Category = *b.Category
	}
	if b.PriceCents == nil {
		return in, fmt.Errorf("price_cents is required")
	}
	in.PriceCents = *b.PriceCents
	if b.PerUserLimit == nil {
		return in, fmt.Errorf("per_user_limit is required")
	}
	in.PerUserLimit = *b.PerUserLimit
	var err error
	if in.StartsAt, err = parseTime("starts_at", b.StartsAt); err != nil {
		return in, err
	}
	if in.EndsAt, err = parseTime("ends_at", b.EndsAt); err != nil {
		return in, err
	}
	if err := in.Validate(); err != nil {
		return in, err
	}
	return in, nil
}

func parseTime(field string, s *string) (*time.Time, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, fmt.Errorf("%s must be an RFC 3339 time such as 2026-11-22T10:00:00Z", field)
	}
	t = t.UTC()
	return &t, nil
}

func (s *Server) putItem(c *gin.Context) {
	id := c.Param("id")
	var body itemBody
	if err := decodeJSON(c, maxBody, &body); err != nil {
		fail(c, err)
		return
	}
	if body.ID != nil && *body.ID != id {
		fail(c, errInvalid("id in the body differs from the path"))
		return
	}
	in, err := body.input(id)
	if err == nil {
		err = s.chargeable(in.PriceCents)
	}
	if err != nil {
		fail(c, asInvalid(err))
		return
	}
	it, created, err := s.upsertItem(c.Request.Context(), in)
	if err != nil {
		fail(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, gin.H{"item": it})
}

// chargeable refuses a price the payment provider would refuse to charge (Stripe's minimum
// for the currency): the shop learns it when saving the item, not a shopper at checkout.
func (s *Server) chargeable(price int64) error {
	if !s.Payments.Enabled() {
		return nil
	}
	if floor := payment.MinCharge(s.Payments.Currency); price < floor {
		return fmt.Errorf("price_cents %d is below the payment provider's minimum charge of %d (%s)", price, floor, s.Payments.Currency)
	}
	return nil
}

// asInvalid makes a plain validation error a 400; sentinel errors keep their mapping.
func asInvalid(err error) error {
	if errors.Is(err, inventory.ErrInvalid) {
		return err
	}
	return errInvalid(err.Error())
}

func (s *Server) adjustStock(c *gin.Context) {
	var body struct {
		Delta *int64 `json:"delta"`
	}
	if err := decodeJSON(c, maxBody, &body); err != nil {
		fail(c, err)
		return
	}
	if body.Delta == nil {
		fail(c, errInvalid("delta is required"))
		return
	}
	key, err := idempotencyKey(c)
	if err != nil {
		fail(c, err)
		return
	}
	it, err := s.Inventory.AdjustStockOnce(c.Request.Context(), c.Param("id"), *body.Delta, key)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"item": it})
}

// archiveItem takes an item off sale for good (inventory.Store.Archive); again: 200 as well.
func (s *Server) archiveItem(c *gin.Context) {
	it, err := s.Inventory.Archive(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"item": it})
}

// adminItems lists every item, archived ones included, with the status an admin sees.
func (s *Server) adminItems(c *gin.Context) {
	items, err := s.Inventory.List(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	now := time.Now()
	for i := range items {
		items[i].Status = items[i].AdminStatusAt(now)
	}
	c.JSON(http.StatusOK, gin.H{"items": items})
}

// listItems and getItem (catalogue.go) answer from the encoded snapshot.

type importRow struct {
	line int
	in   inventory.Input
	err  error
}

const (
	// importChunk rows are parsed, then saved in one inventory.UpsertMany, at a time: an
	// import's memory is bounded by a chunk, not by the file (150,000 short rows fit in 8 MiB).
	importChunk = 4096
	// maxImportErrors bad rows are listed in a reply; "failed" counts them all.
	maxImportErrors = 1000
)

var errImportCut = &apiError{http.StatusServiceUnavailable, "unavailable", "a backing service failed during the import: the rows before the failure may be loaded, the rest are not; send the file again (each row is an upsert)"}

// importReport is an import's reply: counts, and the first bad rows in file order.
type importReport struct {
	created, updated, failed int
	errors                   []importError
}

type importError struct {
	line    int
	message string
}

func (r *importReport) bad(line int, err error) {
	r.failed++
	if len(r.errors) < maxImportErrors {
		r.errors = append(r.errors, importError{line, clip(err.Error(), 200)})
	}
}

// importItems loads a CSV file or a JSON array of items: bad rows are reported and skipped,
// good rows load. The body (at most 8 MiB) is read whole, but its rows are parsed and saved
// a chunk at a time, in file order, so the memory an import takes does not grow with its rows.
func (s *Server) importItems(c *gin.Context) {
	b, err := readBody(c, maxImportBody)
	if err != nil {
		fail(c, err)
		return
	}
	var rows func(yield func(importRow) bool)
	switch strings.ToLower(c.ContentType()) {
	case "text/csv":
		rows, err = csvRows(b)
	case "application/json", "":
		rows, err = jsonRows(b)
	default:
		err = fmt.Errorf("Content-Type must be text/csv or application/json")
	}
	if err != nil {
		fail(c, asInvalid(err))
		return
	}
	var rep importReport
	chunk := make([]importRow, 0, importChunk)
	sent := false // whether a chunk reached Redis: a failure after it changed something
	save := func() error {
		if err := s.saveImportChunk(c.Request.Context(), chunk, &rep); err != nil {
			return err
		}
		sent, chunk = true, chunk[:0]
		return nil
	}
	for row := range rows {
		if chunk = append(chunk, row); len(chunk) == importChunk {
			if err = save(); err != nil {
				break
			}
		}
	}
	if err == nil && len(chunk) > 0 {
		err = save()
	}
	if err != nil {
		if !sent && len(chunk) == 0 {
			fail(c, err)
			return
		}
		slog.Error("import cut short", "request_id", requestIDOf(c), "created", rep.created, "updated", rep.updated, "err", err)
		fail(c, errImportCut)
		return
	}
	writeImportReply(c, &rep)
}

// saveImportChunk saves a chunk's good rows in one call (each row still its own upsert, in
// file order) and adds each row's outcome to rep in file order, as if saved one by one.
func (s *Server) saveImportChunk(ctx context.Context, rows []importRow, rep *importReport) error {
	ins := make([]inventory.Input, 0, len(rows))
	for i, r := range rows {
		if r.err == nil {
			rows[i].err = s.chargeable(r.in.PriceCents)
		}
		if rows[i].err == nil {
			ins = append(ins, r.in)
		}
	}
	saved, err := s.upsertItems(ctx, ins)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.err == nil {
			res := saved[0]
			saved = saved[1:]
			switch {
			case res.Err != nil:
				r.err = res.Err
			case res.Created:
				rep.created++
			default:
				rep.updated++
			}
		}
		if r.err != nil {
			rep.bad(r.line, r.err)
		}
	}
	return nil
}

// writeImportReply answers {"created","updated","failed","errors"}: "failed" counts every bad
// row, "errors" lists the first maxImportErrors of them, so the reply stays small (a message
// may quote its bad input, clipped to 200 bytes: at most ~250 KB).
func writeImportReply(c *gin.Context, rep *importReport) {
	b := fmt.Appendf(make([]byte, 0, 512+len(rep.errors)*64), `{"created":%d,"updated":%d,"failed":%d,"errors":[`, rep.created, rep.updated, rep.failed)
	for i, e := range rep.errors {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"line":`...)
		b = strconv.AppendInt(b, int64(e.line), 10)
		b = append(b, `,"message":`...)
		b = jsonx.AppendString(b, e.message)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	writeJSON(c, http.StatusOK, b)
}

// clip cuts s to at most n bytes on a rune boundary (a message may quote the bad input).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

var csvHeader = []string{"id", "name", "category", "price_cents", "stock", "per_user_limit", "starts_at", "ends_at"}

// csvRows checks the header of a CSV file and returns its rows, read one at a time.
func csvRows(b []byte) (func(yield func(importRow) bool), error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true // csvInput copies what it keeps
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("empty body: CSV must start with the header row %s", strings.Join(csvHeader, ","))
	}
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("CSV must start with the header row %s", strings.Join(csvHeader, ","))
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	want := csvHeader
	if len(header) == len(csvHeader)+1 {
		want = append(slices.Clip(csvHeader), "image_url")
	}
	if len(header) != len(want) {
		return nil, fmt.Errorf("CSV header must be %s (then image_url, optional)", strings.Join(csvHeader, ","))
	}
	for i, h := range header {
		if strings.TrimSpace(h) != want[i] {
			return nil, fmt.Errorf("CSV header must be %s (then image_url, optional)", strings.Join(csvHeader, ","))
		}
	}
	columns := len(want)
	return func(yield func(importRow) bool) {
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				// The reader goes on at the line after the broken record, so the rows after it are
				// read as written. No FieldPos: a record that failed in its first field has none.
				line, msg := 0, "unreadable CSV row"
				var pe *csv.ParseError
				if errors.As(err, &pe) {
					line = pe.StartLine
					msg = fmt.Sprintf("unreadable CSV row: %v", pe.Err)
					// A stray quote stretched the record over several lines: name them all.
					if pe.Line > pe.StartLine {
						msg += fmt.Sprintf(" (lines %d to %d)", pe.StartLine, pe.Line)
					}
				}
				if !yield(importRow{line: line, err: errors.New(msg)}) {
					return
				}
				continue
			}
			line, _ := r.FieldPos(0)
			row := importRow{line: line}
			// A record a stray quote stretched over lines holds a newline, which no field's
			// check lets through: it is reported, never loaded.
			row.in, row.err = csvInput(rec, columns)
			if !yield(row) {
				return
			}
		}
	}, nil
}

// csvInput reads one CSV row of the header's columns (csvHeader, then image_url or not).
func csvInput(rec []string, columns int) (inventory.Input, error) {
	if len(rec) != columns {
		return inventory.Input{}, fmt.Errorf("want %d fields, got %d", columns, len(rec))
	}
	num := func(name, v string, required bool) (*int64, error) {
		v = strings.TrimSpace(v)
		if v == "" {
			if required {
				return nil, fmt.Errorf("%s is required", name)
			}
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s must be an integer", name)
		}
		return &n, nil
	}
	b := itemBody{Name: &rec[1], Category: &rec[2], StartsAt: &rec[6], EndsAt: &rec[7]}
	if columns > len(csvHeader) {
		b.ImageURL = &rec[len(csvHeader)]
	}
	var err error
	if b.PriceCents, err = num("price_cents", rec[3], true); err != nil {
		return inventory.Input{}, err
	}
	if b.Stock, err = num("stock", rec[4], false); err != nil {
		return inventory.Input{}, err
	}
	if b.PerUserLimit, err = num("per_user_limit", rec[5], true); err != nil {
		return inventory.Input{}, err
	}
	in, err := b.input(strings.TrimSpace(rec[0]))
	in.KeepQueue = true // the CSV has no queue column: an import leaves waiting rooms alone
	in.KeepImage = b.ImageURL == nil
	return in, err
}

// jsonRows checks that b is one JSON array and returns its elements as rows, decoded one at a
// time (json.Decoder's Token and More): never the whole array's values at once. The syntax is
// checked first, whole, so a broken file is refused before any row loads.
func jsonRows(b []byte) (func(yield func(importRow) bool), error) {
	const want = "body must be a JSON array of items"
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty body: " + want)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s: %s", want, jsonSyntaxMessage(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New(want)
	}
	return func(yield func(importRow) bool) {
		for line := 1; dec.More(); line++ {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return // not after json.Valid
			}
			row := importRow{line: line}
			row.in, row.err = jsonInput(raw)
			if !yield(row) {
				return
			}
		}
	}, nil
}

// jsonSyntaxMessage says where JSON that json.Valid refused breaks, reading it token by token.
func jsonSyntaxMessage(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "malformed JSON: more than one value"
		}
		if err != nil {
			return jsonMessage(err, "malformed JSON")
		}
	}
}

// jsonInput reads one element of a JSON import.
func jsonInput(raw json.RawMessage) (inventory.Input, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return inventory.Input{}, errors.New("expected an object: an item must be a JSON object")
	}
	var body itemBody
	if err := strictUnmarshal(raw, &body); err != nil {
		return inventory.Input{}, err
	}
	if body.ID == nil {
		return inventory.Input{}, fmt.Errorf("id is required")
	}
	in, err := body.input(*body.ID)
	in.KeepQueue = body.Queue == nil
	in.KeepImage = body.ImageURL == nil
	return in, err
}

// upsertItem saves an item and, for an update, moves it to its (possibly new) category board.
// The board move is best effort: the item is saved either way, and its next rating moves it.
func (s *Server) upsertItem(ctx context.Context, in inventory.Input) (inventory.Item, bool, error) {
	it, created, err := s.Inventory.Upsert(ctx, in)
	if err != nil || created || s.Ranking == nil {
		return it, created, err
	}
	if err := s.Ranking.SetCategory(ctx, it.ID, it.Category); err != nil {
		slog.Warn("item saved but its category board was not moved", "item", it.ID, "err", err)
	}
	return it, created, nil
}

// upsertItems saves items as upsertItem does one, at a cost that grows with the items alone:
// one inventory.UpsertMany, then the updated items' board moves in one go (best effort too).
func (s *Server) upsertItems(ctx context.Context, ins []inventory.Input) ([]inventory.UpsertResult, error) {
	res, err := s.Inventory.UpsertMany(ctx, ins)
	if err != nil || s.Ranking == nil {
		return res, err
	}
	moved := map[string]string{} // item -> category (a later row of an item wins, as it did in Redis)
	for _, r := range res {
		if r.Err == nil && !r.Created {
			moved[r.Item.ID] = r.Item.Category
		}
	}
	if err := s.Ranking.SetCategories(ctx, moved); err != nil {
		slog.Warn("items saved but not all of their category boards were moved", "items", len(moved), "err", err)
	}
	return res, nil
}
