package httpapi

// SetStreamJoinHook makes every catalogue stream's handler call f after it read the catalogue
// for its first event and before it joins the hub (the window a change can fall into).
func SetStreamJoinHook(s *Server, f func()) { s.stream.beforeJoin = f }
