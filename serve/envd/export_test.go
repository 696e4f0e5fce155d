package envd

// Subscribers counts the clients connected to process pid of sandbox id
// (-1 when the handler knows no such process), for tests that must wait
// for a disconnect to reach the handler.
func Subscribers(h *Handler, id string, pid uint32) int {
	h.mu.Lock()
	bx := h.boxes[id]
	h.mu.Unlock()
	if bx == nil {
		return -1
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	c := bx.cmds[int(pid)]
	if c == nil {
		return -1
	}
	return c.subs
}
