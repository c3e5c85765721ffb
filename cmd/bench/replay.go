package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"
)

// The same-reply baselines: a bare Gin handler answering exactly what the api answered (status,
// headers and body, recorded once). net/http's costs of the request and the reply are then on
// both sides, and the ratio is what the api does to find its answer.

// repliesEnv holds the replay server's replies, as JSON (a list of recordedReply).
const repliesEnv = "FLASHSALE_BENCH_REPLIES"

// recordedReply is one answer of the api, served by the replay baseline on method and route
// (a Gin route pattern: the sold-out replies come for /api/items/gone/purchase).
type recordedReply struct {
	Method string      `json:"method"`
	Route  string      `json:"route"`
	Status int         `json:"status"`
	Header http.Header `json:"header"` // without Date, which net/http writes on both sides
	Body   []byte      `json:"body"`
}

// recordReply sends the request bytes req to addr once and keeps the reply.
func recordReply(ctx context.Context, addr string, req []byte, method, route string) (recordedReply, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return recordedReply{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(req); err != nil {
		return recordedReply{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return recordedReply{}, fmt.Errorf("bench: recording %s %s: %w", method, route, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return recordedReply{}, err
	}
	h := resp.Header.Clone()
	h.Del("Date")
	return recordedReply{Method: method, Route: route, Status: resp.StatusCode, Header: h, Body: body}, nil
}

// serveReplay adds the replay routes to r: each answers its recorded reply, written the way a
// bare Gin handler writes one (c.Header for each header, c.Data for the body). It does not
// read the request body (net/http discards a small one).
func serveReplay(r *gin.Engine) error {
	var replies []recordedReply
	if err := json.Unmarshal([]byte(os.Getenv(repliesEnv)), &replies); err != nil {
		return fmt.Errorf("bench: %s: %w", repliesEnv, err)
	}
	for _, rep := range replies {
		contentType := rep.Header.Get("Content-Type")
		r.Handle(rep.Method, rep.Route, func(c *gin.Context) {
			for k, v := range rep.Header {
				if k != "Content-Type" {
					c.Header(k, v[0])
				}
			}
			c.Data(rep.Status, contentType, rep.Body)
		})
	}
	return nil
}

// startReplay records the api's answers to reqs (request bytes for the api, each with the
// route that serves it) and starts a replay baseline serving them. Each request is sent twice
// and the second answer kept: the answer of a warm api (the sold-out short cut, say, answers
// from memory after the script's first answer, without the rate-limit headers).
func (b *bench) startReplay(ctx context.Context, name string, reqs []replayRequest) (*child, error) {
	var replies []recordedReply
	for _, q := range reqs {
		var rep recordedReply
		for range 2 {
			var err error
			if rep, err = recordReply(ctx, b.api.addr, q.req, q.method, q.route); err != nil {
				return nil, err
			}
		}
		replies = append(replies, rep)
	}
	j, err := json.Marshal(replies)
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c, err := start(ctx, name, b.self, nil, []string{serveEnv + "=replay", addrEnv + "=" + addr, repliesEnv + "=" + string(j)},
		addr, "", b.logw)
	if err != nil {
		return nil, err
	}
	b.replays = append(b.replays, c)
	return c, nil
}

// replayRequest is one request to record: its bytes (for the api) and its Gin route.
type replayRequest struct {
	req           []byte
	method, route string
}
