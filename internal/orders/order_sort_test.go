package orders

import (
	"sort"
	"testing"
	"time"
)

// Orders made in the same millisecond list newest first by sequence number: x.10 before x.9
// (a string comparison puts "x.9" first).
func TestNewerFirstComparesSequencesAsNumbers(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000).UTC()
	list := []Order{
		{ID: "x.9", ItemID: "x", CreatedAt: at},
		{ID: "x.10", ItemID: "x", CreatedAt: at},
		{ID: "x.100", ItemID: "x", CreatedAt: at},
		{ID: "y.2", ItemID: "y", CreatedAt: at.Add(time.Millisecond)},
		{ID: "x.1", ItemID: "x", CreatedAt: at.Add(-time.Millisecond)},
	}
	sort.SliceStable(list, func(a, b int) bool { return newerFirst(list[a], list[b]) })
	var got []string
	for _, o := range list {
		got = append(got, o.ID)
	}
	want := []string{"y.2", "x.100", "x.10", "x.9", "x.1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
