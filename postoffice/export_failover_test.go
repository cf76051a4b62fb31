package postoffice

// Knows reports whether p has been told of node id (a node list named it).
func (p *Postoffice) Knows(id int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, known := range p.connected {
		if known == id {
			return true
		}
	}
	return false
}
