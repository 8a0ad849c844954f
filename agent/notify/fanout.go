package notify

import (
	"slices"
	"unicode/utf8"
)

// MaxFailedItems bounds the failed children a notification lists.
const MaxFailedItems = 100

// MaxItemText bounds the text of one listed item, in bytes.
const MaxItemText = 512

// Fanout is what a fanout parent's notification says of its children.
type Fanout struct {
	// Items is the number of items (children) of the parent's plan.
	Items int `json:"items"`
	// Succeeded and Failed count the children that ended so; a failed child
	// used all its attempts.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// NotRun counts the children stopped or never started (the parent timed
	// out or was stopped).
	NotRun int `json:"not_run,omitempty"`
	// PartialTolerance is the share of the items allowed to fail with the
	// parent still a success.
	PartialTolerance float64 `json:"partial_tolerance"`
	// FailedItems lists the failed children in item order, at most
	// MaxFailedItems of them.
	FailedItems []FailedItem `json:"failed_items,omitempty"`
	// FailedItemsTruncated says more children failed than FailedItems lists.
	FailedItemsTruncated bool `json:"failed_items_truncated,omitempty"`
}

// FailedItem is one failed child of a fanout parent.
type FailedItem struct {
	// Index is the item's position in the plan, from 0.
	Index int `json:"index"`
	// Item is the item, cut to MaxItemText bytes (ItemTruncated then).
	Item          string `json:"item"`
	ItemTruncated bool   `json:"item_truncated,omitempty"`
	// RunID is the child's run id.
	RunID string `json:"run_id"`
}

// AddFailed appends a failed child to f's list while it has room, and
// otherwise marks the list truncated. An item longer than MaxItemText
// bytes is cut on a rune boundary.
func (f *Fanout) AddFailed(index int, item, runID string) {
	if len(f.FailedItems) >= MaxFailedItems {
		f.FailedItemsTruncated = true
		return
	}
	fi := FailedItem{Index: index, Item: item, RunID: runID}
	if len(item) > MaxItemText {
		cut := MaxItemText
		for cut > 0 && !utf8.RuneStart(item[cut]) {
			cut--
		}
		fi.Item, fi.ItemTruncated = item[:cut], true
	}
	f.FailedItems = append(f.FailedItems, fi)
}

// Clone returns a copy of f that shares no memory with it (nil for nil).
func (f *Fanout) Clone() *Fanout {
	if f == nil {
		return nil
	}
	c := *f
	c.FailedItems = slices.Clone(f.FailedItems)
	return &c
}
