package record

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// CheckDSN reports what is wrong with a Postgres connection string as pgx reads it (URL or
// key=value), without the string itself (which may hold a password); nil when it parses.
func CheckDSN(dsn string) error {
	_, err := pgconn.ParseConfig(dsn)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 && strings.HasPrefix(msg, "cannot parse `") {
		msg = msg[i+3:] // pgx quotes the whole string
	}
	return dsnError(msg)
}

type dsnError string

func (e dsnError) Error() string { return string(e) }
