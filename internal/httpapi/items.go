package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/keyspace"
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
}

// input turns the body into an inventory.Input; the error names the bad field.
func (b itemBody) input(id string) (inventory.Input, error) {
	in := inventory.Input{ID: id, Stock: b.Stock, Queue: b.Queue}
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

// checkItemID answers a malformed item id in an item route's path (/items/:id, with or without
// more after it) 400 invalid_request, as the contract says, before any handler or store sees
// it; an id of the right form that names no item stays 404. It runs on every request: the id
// check comes first and is a short byte loop.
func checkItemID(c *gin.Context) {
	if id, ok := c.Params.Get("id"); ok && !keyspace.ValidID(id) && strings.Contains(c.FullPath(), "/items/:id") {
		fail(c, errBadItemID)
	}
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

// listItems and getItem (replies.go) answer from the encoded snapshot.

type importRow struct {
	line int
	in   inventory.Input
	err  error
}

// importItems loads a CSV file or a JSON array of items: bad rows are reported and skipped,
// good rows load.
func (s *Server) importItems(c *gin.Context) {
	b, err := readBody(c, maxImportBody)
	if err != nil {
		fail(c, err)
		return
	}
	var rows []importRow
	ct := strings.ToLower(c.ContentType())
	switch ct {
	case "text/csv":
		rows, err = parseCSV(b)
	case "application/json", "":
		rows, err = parseJSONItems(b)
	default:
		err = fmt.Errorf("Content-Type must be text/csv or application/json")
	}
	if err != nil {
		fail(c, asInvalid(err))
		return
	}
	// Every good row is saved in one call (each row still its own upsert, in file order), then
	// the reply is built in file order, as if the rows had been saved one by one.
	ins := make([]inventory.Input, 0, len(rows))
	for _, r := range rows {
		if r.err == nil {
			ins = append(ins, r.in)
		}
	}
	saved, err := s.upsertItems(c.Request.Context(), ins)
	if err != nil {
		fail(c, err)
		return
	}
	// Each row's outcome, in file order: a save's error joins the parse errors in rows.
	created, updated, failed := 0, 0, 0
	for i := range rows {
		r := &rows[i]
		if r.err == nil {
			res := saved[0]
			saved = saved[1:]
			switch {
			case res.Err != nil:
				r.err = res.Err
			case res.Created:
				created++
			default:
				updated++
			}
		}
		if r.err != nil {
			failed++
		}
	}
	writeImportReply(c, created, updated, failed, rows)
}

// writeImportReply answers {"created","updated","failed","errors"} with every bad row, as the
// contract asks, streamed through a small buffer instead of built whole: 8 MiB of junk lines
// make a reply of a few hundred MB (a message may quote its bad input, clipped to 200 bytes),
// which must never sit in the api's memory at once. "failed" (how many rows were refused) comes
// before the list, so a client can tell the size of what follows.
func writeImportReply(c *gin.Context, created, updated, failed int, rows []importRow) {
	c.Writer.Header()["Content-Type"] = jsonContentTypeValue
	c.Writer.WriteHeader(http.StatusOK)
	w := bufio.NewWriterSize(c.Writer, 32<<10)
	b := fmt.Appendf(make([]byte, 0, 512), `{"created":%d,"updated":%d,"failed":%d,"errors":[`, created, updated, failed)
	sep := false
	for _, r := range rows {
		if r.err == nil {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, `{"line":`...)
		b = strconv.AppendInt(b, int64(r.line), 10)
		b = append(b, `,"message":`...)
		b = jsonx.AppendString(b, clip(r.err.Error(), 200))
		b = append(b, '}')
		_, _ = w.Write(b)
		b = b[:0]
	}
	b = append(b, "]}"...)
	_, _ = w.Write(b)
	_ = w.Flush() // a client gone half-way is the only error: nothing is left to tell it
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

func parseCSV(b []byte) ([]importRow, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("CSV must start with the header row %s", strings.Join(csvHeader, ","))
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	if len(header) != len(csvHeader) {
		return nil, fmt.Errorf("CSV header must be %s", strings.Join(csvHeader, ","))
	}
	for i, h := range header {
		if strings.TrimSpace(h) != csvHeader[i] {
			return nil, fmt.Errorf("CSV header must be %s", strings.Join(csvHeader, ","))
		}
	}
	var rows []importRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// No FieldPos here: a record that failed in its first field has none (it panics).
			// The reader goes on at the line after the broken record, so the rows after it are
			// read as written. A stray quote that stretched a record over several lines leaves a
			// newline in one of its fields, which no field's check lets through: such a record is
			// reported (with the lines it took), never loaded.
			line, msg := 0, "unreadable CSV row"
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.StartLine
				msg = fmt.Sprintf("unreadable CSV row: %v", pe.Err)
				if pe.Line > pe.StartLine {
					msg += fmt.Sprintf(" (lines %d to %d)", pe.StartLine, pe.Line)
				}
			}
			rows = append(rows, importRow{line: line, err: errors.New(msg)})
			continue
		}
		line, _ := r.FieldPos(0)
		row := importRow{line: line}
		row.in, row.err = csvInput(rec)
		rows = append(rows, row)
	}
	return rows, nil
}

func csvInput(rec []string) (inventory.Input, error) {
	if len(rec) != len(csvHeader) {
		return inventory.Input{}, fmt.Errorf("want %d fields, got %d", len(csvHeader), len(rec))
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
	return in, err
}

func parseJSONItems(b []byte) ([]importRow, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("body must be a JSON array of items: %v", err)
	}
	rows := make([]importRow, len(raw))
	for i, m := range raw {
		rows[i].line = i + 1
		var body itemBody
		if err := strictUnmarshal(m, &body); err != nil {
			rows[i].err = err
			continue
		}
		if body.ID == nil {
			rows[i].err = fmt.Errorf("id is required")
			continue
		}
		rows[i].in, rows[i].err = body.input(*body.ID)
		rows[i].in.KeepQueue = body.Queue == nil
	}
	return rows, nil
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
