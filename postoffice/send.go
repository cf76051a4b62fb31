package postoffice

import "github.com/elasticps/elasticps/message"

// Send sends a data message: it fills in Sender, logs at
// PS_VERBOSE=2 and hands it to the resender when enabled.
func (p *Postoffice) Send(m *message.Message) (int, error) {
	select {
	case <-p.stopped:
		return 0, ErrStopped
	default:
	}
	m.Meta.Sender = p.myID.Load()
	var sig uint64
	kept := false
	if p.resender != nil {
		// Kept before it goes: its ACK may come back before Send returns.
		sig, kept = p.resender.addOutgoing(m)
	}
	n, err := p.tr.Send(m)
	if err != nil {
		if kept {
			p.resender.removeOutgoing(sig)
		}
		return n, err
	}
	if p.cfg.Verbose >= 2 {
		p.log.Info("send", "message", m.String())
	}
	return n, nil
}

// KeepsSent reports whether Send keeps the messages it sent after it
// returns (PS_RESEND keeps them until acknowledged, to send them again).
// Without it, a caller may reuse a Message once Send returned.
func (p *Postoffice) KeepsSent() bool { return p.resender != nil }

// sendControl stamps a control message with the van timestamp and sends it.
func (p *Postoffice) sendControl(m *message.Message) error {
	if m.Meta.Timestamp == message.Empty {
		m.Meta.Timestamp = p.timestamp.Add(1) - 1
	}
	if err := p.beforeAddNode(m); err != nil {
		return err
	}
	_, err := p.Send(m)
	return err
}

// NextTimestamp returns the van-level counter (ps::Van::GetTimestamp).
func (p *Postoffice) NextTimestamp() int32 { return p.timestamp.Add(1) - 1 }
