package postoffice

import "github.com/elasticps/elasticps/scheduler"

// NodeStatus is the scheduler's record of one server or worker, for status
// displays (elasticps ctl status).
type NodeStatus struct {
	Addr string // host:port as registered ("" if unknown)
	Dead bool   // declared dead and not replaced since
	Left bool   // left the job (drained, or released at its end)
}

// NodeStatus returns, on the scheduler, its record of node id; false if
// it knows no such node (and before Start and after Stop).
func (p *Postoffice) NodeStatus(id int32) (NodeStatus, bool) {
	var st NodeStatus
	p.driver.query(func(s *scheduler.State) {
		st = NodeStatus{Addr: s.Addr(id), Dead: s.Dead(id), Left: s.Left(id)}
	})
	return st, st.Addr != ""
}
