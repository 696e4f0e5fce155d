package envd

// Subscribers counts the clients connected to process pid of sandbox id
// (-1 when there is no such process), for tests that must wait for a
// disconnect to reach the handler.
func Subscribers(h *Handler, id string, pid uint32) int {
	h.mu.Lock()
	bx := h.boxes[id]
	h.mu.Unlock()
	if bx == nil {
		return -1
	}
	bx.mu.Lock()
	p := bx.procs[pid]
	bx.mu.Unlock()
	if p == nil {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.subs)
}
