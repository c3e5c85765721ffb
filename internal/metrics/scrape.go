package metrics

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
)

// Scrape reads one sample from a /metrics page (base is the listener's URL, e.g.
// "http://127.0.0.1:9090"): series is the whole series as printed, labels included (e.g.
// `flashsale_consumer_events_total{result="applied"}`); absent reads 0. For the tests and the
// bench that watch a running process from outside.
func Scrape(base, series string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}
