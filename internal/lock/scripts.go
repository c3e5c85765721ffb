package lock

import "github.com/flashsale/flashsale/internal/exactlyonce"

// The job lock's scripts (lua/lock/), each wrapped by one function of this package.
// NewChange marks a state change a client is answered for; New, one that is not.
var (
	obtainScript  = exactlyonce.New("lock_obtain", "lock/obtain.lua")
	refreshScript = exactlyonce.New("lock_refresh", "lock/refresh.lua")
	releaseScript = exactlyonce.New("lock_release", "lock/release.lua")
)
