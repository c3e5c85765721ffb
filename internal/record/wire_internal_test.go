package record

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestEncoderMatchesPgx: every parameter type the writer sends, encoded by encoder, reaches
// Postgres as the same value pgx's own encoding of it does (compared as Postgres prints them),
// NULL elements, empty arrays, non-ASCII text, extreme integers and times before 2000, in
// other zones and with sub-microsecond digits included.
func TestEncoderMatchesPgx(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.EmptyPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	tm := func(v time.Time) *time.Time { return &v }
	east := time.FixedZone("", 5*3600+30*60)
	times := []time.Time{
		time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 1500, east),
		time.Date(1900, 6, 1, 12, 0, 0, 0, time.UTC),
		time.UnixMilli(1700000000123),
	}
	cases := []struct {
		pgType string
		ours   any // what the writer passes to encoder
		pgxs   any // the same value as pgx takes it
	}{
		{"text[]", []string{"a", "", "Café ☕", "rec/1700000000000-3", "quote\" and \\ back"}, nil},
		{"text[]", []string{}, nil},
		{"text[]", []*string{s("a"), nil, s("")}, nil},
		{"text[]", []*string{nil}, nil},
		{"bytea[]", [][]byte{[]byte("k"), nil, {}, {0, 1, 255}}, nil},
		{"bigint[]", []int64{0, 1, -1, math.MaxInt64, math.MinInt64}, nil},
		{"bigint[]", []*int64{n(7), nil, n(-3)}, nil},
		{"int[]", []int32{0, -1, math.MaxInt32, math.MinInt32}, nil},
		{"smallint[]", smallints{1, 5, -1, math.MaxInt16}, []int16{1, 5, -1, math.MaxInt16}},
		{"timestamptz[]", times, nil},
		{"timestamptz[]", []*time.Time{tm(times[0]), nil, tm(times[3])}, nil},
		{"timestamptz", times[0], nil},
		{"timestamptz", times[3], nil},
	}
	enc := new(encoder)
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%d %s", i, tc.pgType), func(t *testing.T) {
			sql := "SELECT $1::" + tc.pgType + "::text"
			name := fmt.Sprintf("test_%d", i)
			if _, err := conn.Prepare(ctx, name, sql); err != nil {
				t.Fatal(err)
			}
			values, formats, err := enc.encode([]any{tc.ours})
			if err != nil {
				t.Fatal(err)
			}
			res := conn.PgConn().ExecPrepared(ctx, name, values, formats, nil).Read()
			if res.Err != nil {
				t.Fatalf("%s with our encoding: %v", tc.pgType, res.Err)
			}
			got := string(res.Rows[0][0])
			pgxValue := tc.pgxs
			if pgxValue == nil {
				pgxValue = tc.ours
			}
			var want string
			if err := conn.QueryRow(ctx, sql, pgxValue).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: ours %s, pgx %s", tc.pgType, got, want)
			}
		})
	}
	if _, _, err := enc.encode([]any{[]float64{1}}); err == nil {
		t.Fatal("encoder took a type it has no encoding for")
	}
}
