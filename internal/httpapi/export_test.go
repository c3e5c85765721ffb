package httpapi

// SetStreamJoinHook makes every catalogue stream's handler call f after it read the catalogue
// for its first event and before it joins the hub (the window a change can fall into).
func SetStreamJoinHook(s *Server, f func()) { s.stream.beforeJoin = f }

// BoardCached reports whether the leaderboard reply (board, category, limit) is in the cache.
func BoardCached(s *Server, board, category string, limit int) bool {
	s.boards.mu.Lock()
	defer s.boards.mu.Unlock()
	_, ok := s.boards.m[boardKey(board, category, limit)]
	return ok
}

// CachedBoards is how many leaderboard replies the cache holds.
func CachedBoards(s *Server) int {
	s.boards.mu.Lock()
	defer s.boards.mu.Unlock()
	return len(s.boards.m)
}
