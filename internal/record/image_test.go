package record_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
)

// TestApplyItemImageAndArchive: an item's picture follows its newest item.upserted (none
// after one without it), and item.archived sets archived_at without touching the attributes.
func TestApplyItemImageAndArchive(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	read := func() record.Item {
		var it record.Item
		if err := db.First(&it, "id = ?", "a").Error; err != nil {
			t.Fatal(err)
		}
		return it
	}
	if _, err := w.Apply(ctx, msgs(t,
		ev(events.ItemUpserted, 10, func(e *events.Event) { e.ImageURL = "https://img.example/a.png" }))); err != nil {
		t.Fatal(err)
	}
	if it := read(); it.ImageURL != "https://img.example/a.png" || it.ArchivedAt != nil {
		t.Fatalf("after the first upsert: image %q archived %v", it.ImageURL, it.ArchivedAt)
	}
	if _, err := w.Apply(ctx, msgs(t, ev(events.ItemArchived, 30, nil), ev(events.ItemUpserted, 20, nil))); err != nil {
		t.Fatal(err)
	}
	it := read()
	if it.ImageURL != "" || it.ArchivedAt == nil || !it.ArchivedAt.Equal(t0.Add(30*time.Millisecond)) || it.Name != "A" {
		t.Fatalf("after an upsert without a picture and the archive: image %q archived %v name %q", it.ImageURL, it.ArchivedAt, it.Name)
	}
}
