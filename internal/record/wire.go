package record

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Each column of a batch is one array parameter, encoded here straight into PostgreSQL's binary
// array format in one reused buffer, since pgx's element-by-element encoding costs much of the
// writer's CPU. A transaction is one pgconn pipeline: each statement is flushed once encoded, so
// Postgres runs it while the next is encoded (docs/design.md, "The record writer").

// Element type OIDs of the binary array format (pg_type).
const (
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidTimestamptz = 1184
)

// microsecondsToY2K is the PostgreSQL timestamp epoch (2000-01-01 UTC) in Unix microseconds.
const microsecondsToY2K = 946_684_800 * 1_000_000

// smallints is a column sent as smallint[] (int2).
type smallints []int16

// stmt is a statement prepared once per connection under its name.
type stmt struct{ name, sql string }

// txBatch is a transaction's statements sent as one pipeline. When a statement fails,
// Postgres skips the rest up to the Sync, COMMIT included.
type txBatch struct {
	pc    *pgx.Conn
	p     *pgconn.Pipeline
	enc   *encoder
	names []string                                 // each queued statement's name, for errors
	rows  map[int]func(*pgconn.ResultReader) error // readers of statements' rows, by position
	err   error                                    // the first error preparing, encoding or sending
}

var encoders = sync.Pool{New: func() any { return new(encoder) }}

// statements are every statement the writer prepares.
var statements = []stmt{insertEvents, insertOrders, insertMovements, insertDead, claimEvents,
	mergeItems, mergeOrders, mergeRatings, mergeMovements, selectOrders, mergePayments,
	mergeQueue, insertTallies}

// newTxBatch starts a pipeline on pc, its statements prepared (pgx keeps the statements it
// prepared per connection: after the first batch on a connection these are map lookups).
func newTxBatch(ctx context.Context, pc *pgx.Conn) *txBatch {
	t := &txBatch{pc: pc, enc: encoders.Get().(*encoder)}
	for _, s := range statements {
		if _, err := pc.Prepare(ctx, s.name, s.sql); err != nil {
			t.err = fmt.Errorf("prepare %s: %w", s.name, err)
			return t
		}
	}
	t.p = pc.PgConn().StartPipeline(ctx)
	return t
}

// plain queues a statement without parameters (BEGIN, COMMIT).
func (t *txBatch) plain(sql string) {
	if t.err != nil {
		return
	}
	t.p.SendQueryParams(sql, nil, nil, nil, nil)
	t.names = append(t.names, sql)
}

// exec queues s with args, each a column (or a scalar time.Time), and sends it.
func (t *txBatch) exec(s stmt, args ...any) {
	if t.err != nil {
		return
	}
	values, formats, err := t.enc.encode(args)
	if err != nil {
		t.err = fmt.Errorf("%s: %w", s.name, err)
		return
	}
	// The Bind message takes a copy of the values: the encoder's buffer is free again.
	t.p.SendQueryPrepared(s.name, values, formats, nil)
	t.names = append(t.names, s.name)
	if err := t.p.Flush(); err != nil {
		t.err = fmt.Errorf("%s: %w", s.name, err)
	}
}

// query is exec whose result rows go to read.
func (t *txBatch) query(s stmt, read func(*pgconn.ResultReader) error, args ...any) {
	if t.rows == nil {
		t.rows = map[int]func(*pgconn.ResultReader) error{}
	}
	t.rows[len(t.names)] = read
	t.exec(s, args...)
}

// send ends the pipeline and reads its results. On any error the transaction is rolled back.
func (t *txBatch) send() error {
	defer encoders.Put(t.enc)
	err := t.finish()
	if t.err != nil {
		err = t.err
	}
	if err != nil {
		rollback(t.pc)
	}
	return err
}

// finish syncs the pipeline, reads each statement's result up to the first error, and closes
// the pipeline (which reads the rest).
func (t *txBatch) finish() error {
	if t.p == nil {
		return nil
	}
	first := t.p.Sync()
	for i := 0; first == nil; i++ {
		res, err := t.p.GetResults()
		if err != nil {
			first = t.failed(i, err)
			break
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			break // the Sync (or nothing more)
		}
		if read := t.rows[i]; read != nil {
			first = read(rr)
		}
		if _, err := rr.Close(); err != nil && first == nil {
			first = t.failed(i, err)
		}
	}
	if err := t.p.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// failed names the statement an error belongs to.
func (t *txBatch) failed(i int, err error) error {
	if i < len(t.names) {
		return fmt.Errorf("%s: %w", t.names[i], err)
	}
	return err
}

// rollback ends a failed transaction so the pooled connection goes back idle. If that fails
// too, the connection is closed: database/sql then discards it (pgx's stdlib driver reports a
// closed connection as bad) and Postgres rolls the transaction back with the session.
func rollback(pc *pgx.Conn) {
	if pc.IsClosed() || pc.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pc.Exec(ctx, "ROLLBACK"); err != nil || pc.PgConn().TxStatus() != 'I' {
		_ = pc.Close(ctx)
	}
}

// encoder encodes parameters in PostgreSQL's binary format into one reused buffer.
type encoder struct {
	buf     []byte
	ends    []int
	nulls   []bool
	values  [][]byte
	formats []int16
}

// encode encodes args: columns as one-dimensional arrays (nil elements of pointer columns
// are NULL), a time.Time as a timestamptz. The values point into the encoder's buffer until
// the next encode.
func (e *encoder) encode(args []any) ([][]byte, []int16, error) {
	e.buf, e.ends, e.nulls = e.buf[:0], e.ends[:0], e.nulls[:0]
	for _, a := range args {
		null := false
		switch v := a.(type) {
		case []string:
			e.array(oidText, len(v), false)
			for _, s := range v {
				e.elem(len(s))
				e.buf = append(e.buf, s...)
			}
		case []*string:
			e.array(oidText, len(v), hasNil(v))
			for _, s := range v {
				if s == nil {
					e.null()
					continue
				}
				e.elem(len(*s))
				e.buf = append(e.buf, *s...)
			}
		case [][]byte:
			e.array(oidBytea, len(v), hasNilBytes(v))
			for _, b := range v {
				if b == nil {
					e.null()
					continue
				}
				e.elem(len(b))
				e.buf = append(e.buf, b...)
			}
		case []int64:
			e.array(oidInt8, len(v), false)
			for _, n := range v {
				e.elem(8)
				e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(n))
			}
		case []*int64:
			e.array(oidInt8, len(v), hasNil(v))
			for _, n := range v {
				if n == nil {
					e.null()
					continue
				}
				e.elem(8)
				e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(*n))
			}
		case []int32:
			e.array(oidInt4, len(v), false)
			for _, n := range v {
				e.elem(4)
				e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
			}
		case smallints:
			e.array(oidInt2, len(v), false)
			for _, n := range v {
				e.elem(2)
				e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(n))
			}
		case []time.Time:
			e.array(oidTimestamptz, len(v), false)
			for _, t := range v {
				e.elem(8)
				e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(pgMicros(t)))
			}
		case []*time.Time:
			e.array(oidTimestamptz, len(v), hasNil(v))
			for _, t := range v {
				if t == nil {
					e.null()
					continue
				}
				e.elem(8)
				e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(pgMicros(*t)))
			}
		case time.Time:
			e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(pgMicros(v)))
		case nil:
			null = true
		default:
			return nil, nil, fmt.Errorf("record: no binary encoding for %T", a)
		}
		e.ends = append(e.ends, len(e.buf))
		e.nulls = append(e.nulls, null)
	}
	e.values, e.formats = e.values[:0], e.formats[:0]
	start := 0
	for i, end := range e.ends {
		v := e.buf[start:end:end]
		if e.nulls[i] {
			v = nil
		}
		e.values = append(e.values, v)
		e.formats = append(e.formats, 1) // binary
		start = end
	}
	return e.values, e.formats, nil
}

// array writes a one-dimensional array's header: dimensions, null flag, element type, length
// and lower bound (an empty array has no dimension).
func (e *encoder) array(elemOID uint32, n int, hasNull bool) {
	dims, flag := uint32(1), uint32(0)
	if n == 0 {
		dims = 0
	}
	if hasNull {
		flag = 1
	}
	e.buf = binary.BigEndian.AppendUint32(e.buf, dims)
	e.buf = binary.BigEndian.AppendUint32(e.buf, flag)
	e.buf = binary.BigEndian.AppendUint32(e.buf, elemOID)
	if n > 0 {
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
		e.buf = binary.BigEndian.AppendUint32(e.buf, 1)
	}
}

// elem writes an element's length.
func (e *encoder) elem(n int) { e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n)) }

// null writes a NULL element.
func (e *encoder) null() { e.buf = binary.BigEndian.AppendUint32(e.buf, 0xFFFFFFFF) }

// pgMicros is t as PostgreSQL's binary timestamptz: microseconds since 2000-01-01 UTC (as pgx
// encodes it: sub-microsecond digits dropped).
func pgMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - microsecondsToY2K
}

func hasNil[T any](v []*T) bool {
	for _, p := range v {
		if p == nil {
			return true
		}
	}
	return false
}

func hasNilBytes(v [][]byte) bool {
	for _, b := range v {
		if b == nil {
			return true
		}
	}
	return false
}
