package reconcile

import "context"

// SetAfterStart makes Batch call f after it recorded the run's start (tests stall a runner).
func SetAfterStart(o *Options, f func(ctx context.Context)) { o.afterStart = f }

// SetBeforeBegin makes Restore call f between an item's idle check and its first write.
func SetBeforeBegin(o *Options, f func(ctx context.Context, item string)) { o.beforeBegin = f }

// SetAfterBegin makes Restore call f after an item's restore_begin.lua, before its writes.
func SetAfterBegin(o *Options, f func(ctx context.Context, item string)) { o.afterBegin = f }
