package paysim

// SettleAsync ends a pm_card_async payment now, as its timer would: tests use it to decide
// when an async payment succeeds instead of racing its delay.
var SettleAsync = (*Server).settleAsync
